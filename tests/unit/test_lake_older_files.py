"""A lake written by an earlier release reads as one without the newer columns' values.

Releases before the collective columns (the lake's ``collective``, ``coll_*``) wrote
kernel files without them; a data dir kept across an upgrade holds such files, alone or
beside newer ones. Every SQL read of the engine must still bind (a column that no file
of a scan has reads as NULL, as a kernel without collective args) and answer as it did,
the figures that come from those columns aside.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tfprof.collector.lake.location import lake_of
from tfprof.collector.lake.publish import compact_data_dir
from tfprof.collector.lake.segments import collector_id
from tfprof.collector.store import Store
from tfprof.collector.store.importer import import_files
from tfprof.core.collectives import FIELDS, lake_column

from .golden_cli import cli_json

TRACE = (
    Path(__file__).resolve().parents[1]
    / "data/traces/kineto-hta-dist"
    / "nccl_allreduce_rank0_of2.json.gz"
)
NEWER = frozenset(lake_column(f.key) for f in FIELDS)
# Views whose figures do not read the collective columns: the same before and after.
SAME = ("kernels", "streams", "gpus", "memcpy", "jobs", "api", "launch", "steps")


def _without_newer_columns(lake: Path) -> int:
    """Rewrites every kernels file of ``lake`` as a release before the collective
    columns wrote it; the number of files rewritten."""
    files = [p for p in lake.rglob("*.parquet") if "kernels" in p.parts]
    for path in files:
        table = pq.read_table(path)
        kept = [c for c in table.column_names if c not in NEWER]
        assert len(kept) < len(table.column_names), f"{path} has no collective column"
        pq.write_table(table.select(kept), path, write_page_checksum=True)
    return len(files)


def _views(data_dir: Path) -> dict[str, Any]:
    found = {v: cli_json("summary", "--data-dir", data_dir, "--view", v, "--format", "json")
             for v in (*SAME, "collectives", "ranks")}  # fmt: skip
    found["advise"] = cli_json("advise", "--data-dir", data_dir, "--format", "json")
    return found


@pytest.fixture(scope="module")
def before_after(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    data_dir = tmp_path_factory.mktemp("older")
    import_files(Store(data_dir, fsync=False), [TRACE], "nccl", run_id="nccl-r1")
    _done, failed = compact_data_dir(data_dir, lake_of(data_dir), collector_id(data_dir))
    assert not failed
    before = _views(data_dir)
    assert _without_newer_columns(Path(lake_of(data_dir).root)) > 0
    return before, _views(data_dir)


@pytest.mark.parametrize("view", SAME)
def test_views_that_do_not_read_the_newer_columns_answer_the_same(
    before_after: tuple[dict[str, Any], dict[str, Any]], view: str
) -> None:
    before, after = before_after
    assert after[view] == before[view]


def test_collectives_without_their_args_are_still_found_by_kernel_name(
    before_after: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    before, after = before_after
    assert before["collectives"]["rows"], "the trace's NCCL kernels make collectives"

    def calls(doc: Any) -> int:
        return sum(int(row["calls"]) for row in doc["rows"])

    assert calls(after["collectives"]) == calls(before["collectives"])
    # Without the args, each call is known by its launch's host range or kernel name.
    sources = {s.split()[0] for row in after["collectives"]["rows"] for s in row["source"]}
    assert "args" not in sources and sources <= {"annotation", "name"}
    assert after["ranks"]["rows"] and after["advise"] is not None
