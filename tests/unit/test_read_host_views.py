"""The host views (op, scope, api, launch, memory) read through the read engine against
the ``RecordSet`` views' JSON: on the shipped traces imported into a data dir (Kineto
with API calls and ranges, TF timelines with tf_op ranges, several jobs, windows that
clip at both ends) and a trace of device-memory records, with chunks small enough that
state is carried often."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.kineto_memory import memory_trace
from tests.traces import shared_traces
from tests.unit.read_compare import engine_and_oracle, quiet
from tfprof.collector.read import time_chunks

VIEWS = ("op", "scope", "api", "launch", "memory")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    traces = shared_traces()
    root = tmp_path_factory.mktemp("host-views")
    d = root / "data"
    tf, kineto = traces / "tf-timeline-ikhlestov", traces / "kineto-hta"
    for job, files in (
        ("tf", [tf / "GPU_timeline_02_step_1.json"]),
        ("merged5", [tf / "GPU_timeline_03_merged_5_runs.json"]),
        ("sync", [kineto / "event_sync_multi_stream.json.gz"]),
        ("add", [kineto / "simple_add.json.gz"]),
        ("memory", [memory_trace(root, 5000)]),
        ("memory2", [memory_trace(root, 5000)]),
    ):
        quiet(["import", "--data-dir", str(d), "--job", job, *map(str, files)])
    return d


CASES: dict[str, tuple[list[str], str | None, str | None]] = {
    "kineto": (["add"], None, None),
    "kineto, a window": (["add"], "+1s", "+30s"),
    "kineto syncs": (["sync"], None, None),
    "tf ops": (["tf"], None, None),
    "tf ops, a window": (["merged5"], "+5ms", "+120ms"),
    "memory": (["memory", "memory2"], None, None),
    "memory, a window": (["memory"], "+25us", "+45us"),
    "every job": ([], None, None),
}


def _both(d: Path, jobs: list[str], since: str | None, until: str | None,
          view: str) -> tuple[str, str]:  # fmt: skip
    return engine_and_oracle([str(d)], jobs or None, since, until, view)


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("case", list(CASES))
def test_host_views_give_the_record_sets_json(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, view: str, case: str
) -> None:
    monkeypatch.setattr(time_chunks, "CHUNK_ROWS", 7)
    jobs, since, until = CASES[case]
    engine, today = _both(data_dir, jobs, since, until, view)
    assert engine == today


def test_the_cases_show_rows(data_dir: Path) -> None:
    """Each view has rows in some case: the comparisons above are not of empty tables."""
    for view in VIEWS:
        shown = [c for c, (j, s, u) in CASES.items() if '"rows": []' not in _both(
            data_dir, j, s, u, view)[1]]  # fmt: skip
        assert shown, view


def test_host_views_read_segments_and_tails_alike(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compacted into Parquet segments (names and domains dictionary-encoded per row
    group), then one more run in the log: both sources at once."""
    monkeypatch.setattr(time_chunks, "CHUNK_ROWS", 7)
    d = tmp_path / "data"
    shutil.copytree(data_dir, d)
    quiet(["compact", "--data-dir", str(d)])
    kineto = shared_traces() / "kineto-hta" / "simple_add.json.gz"
    quiet(["import", "--data-dir", str(d), "--job", "add", str(kineto)])
    for view in VIEWS:
        for jobs in ([], ["add"]):
            engine, today = _both(d, jobs, None, None, view)
            assert engine == today, (view, jobs)
