"""The host views (op, scope, api, launch, memory) read through the read engine give the
same JSON with every process in one chunk and with chunks small enough that state is
carried often: on the shipped traces imported into a data dir (Kineto with API calls and
ranges, TF timelines with tf_op ranges, several jobs, windows that clip at both ends)
and a trace of device-memory records; compacted segments read as the logs they came
from. What the views show on the shipped traces is pinned by the golden test
(test_golden_outputs.py), and against independent computations by test_host_views.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kineto_memory import memory_trace
from tests.traces import shared_traces
from tests.unit.read_compare import engine_json, logs_and_compacted, quiet, whole_and_chunked

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


def _json(d: Path, jobs: list[str], view: str) -> str:
    return engine_json([str(d)], jobs or None, None, None, view)


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("case", list(CASES))
def test_host_views_give_the_same_json_in_small_chunks(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, view: str, case: str
) -> None:
    jobs, since, until = CASES[case]
    whole, chunked = whole_and_chunked(
        monkeypatch, 7, [str(data_dir)], jobs or None, since, until, view
    )
    assert chunked == whole


def test_the_cases_show_rows(data_dir: Path) -> None:
    """Each view has rows in some case: the comparisons above are not of empty tables."""
    for view in VIEWS:
        shown = [c for c, (j, s, u) in CASES.items() if '"rows": []' not in engine_json(
            [str(data_dir)], j or None, s, u, view)]  # fmt: skip
        assert shown, view


def test_host_views_read_segments_and_tails_alike(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compacted into Parquet segments (names and domains dictionary-encoded per row
    group), then one more run in the log: both sources at once, read in small chunks,
    as the same data dir never compacted (log tails only)."""
    kineto = shared_traces() / "kineto-hta" / "simple_add.json.gz"
    logs, both = logs_and_compacted(data_dir, tmp_path, kineto, "add")
    assert list((both / "lake").glob("markers/**/*.parquet"))
    for view in VIEWS:
        for jobs in ([], ["add"]):
            _, compacted = whole_and_chunked(monkeypatch, 7, [str(both)], jobs or None, None,
                                             None, view)  # fmt: skip
            assert compacted == _json(logs, jobs, view), (view, jobs)
