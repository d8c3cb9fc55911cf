"""Kineto's collective args and ranks, from real multi-GPU traces into the lake.

The expected figures are read from the trace files here with the standard library's
JSON reader, independently of tfprof's importer: every NCCL kernel of the 2-rank DDP
trace carries ``Collective name``, message sizes, dtype and its process group; those
values must reach the ``kernels`` (and, for ``record_param_comms``, ``markers``) tables
of the lake, and files that name their rank must be stored as the ranks of one run.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.traces import shared_traces
from tfprof.collector.lake.location import lake_of
from tfprof.collector.lake.publish import compact_data_dir
from tfprof.collector.lake.query import Engine
from tfprof.collector.lake.segments import collector_id
from tfprof.collector.store import Store
from tfprof.collector.store.importer import import_files
from tfprof.core import collectives
from tfprof.readers import load_trace

OF2 = "kineto-hta-dist/nccl_allreduce_rank0_of2.json.gz"
OF16 = "kineto-hta-dist/rank0_of16.json.gz"


def raw(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt") as f:
        doc: dict[str, Any] = json.load(f)
    return doc


def with_rank(src: Path, rank: int, dst: Path) -> Path:
    """A copy of ``src`` whose ``distributedInfo`` names ``rank`` (the other ranks of a
    job HTA ships only one file of)."""
    doc = raw(src)
    doc["distributedInfo"]["rank"] = rank
    with gzip.open(dst, "wt") as f:
        json.dump(doc, f)
    return dst


def expected_kernels(doc: dict[str, Any]) -> Counter[tuple[str, str, int, str]]:
    """(collective, dtype, in nelems, group ranks) of every kernel with collective args."""
    found: Counter[tuple[str, str, int, str]] = Counter()
    for e in doc["traceEvents"]:
        args = e.get("args", {})
        if e.get("cat") == "kernel" and "Collective name" in args:
            found[(args["Collective name"], args["dtype"], args["In msg nelems"],
                   args["Process Group Ranks"])] += 1  # fmt: skip
    return found


def test_collective_strings_keep_kineto_fields_and_refuse_a_truncated_group() -> None:
    args = {"Collective name": "allreduce", "In msg nelems": 8, "Out msg nelems": "8",
            "Group size": 2, "dtype": "Float", "Process Group Ranks": "[0, 1]",
            "Seq": 41}  # fmt: skip
    fields = collectives.parse(collectives.from_kineto(args) or "")
    assert fields == {"collective": "allreduce", "in_nelems": 8, "out_nelems": 8,
                      "group_size": 2, "dtype": "Float", "pg_ranks": [0, 1], "seq": 41}  # fmt: skip
    truncated = {**args, "Process Group Ranks": "[0, 1, ..."}
    cut = collectives.parse(collectives.from_kineto(truncated) or "")
    assert "pg_ranks" not in cut and cut["collective"] == "allreduce"
    assert collectives.from_kineto({"In msg nelems": 8}) is None  # no collective named


def test_reader_keeps_every_kernels_collective_args() -> None:
    path = shared_traces() / OF2
    doc = raw(path)
    trace = load_trace(path)
    assert (trace.rank, trace.world_size) == (0, 2)
    got: Counter[tuple[str, str, int, str]] = Counter()
    kinds, comm, names = trace.column("kind"), trace.column("collective"), trace.names
    for kind, index in zip(kinds, comm, strict=True):
        if kind == 1 and index:
            f = collectives.parse(names[index])
            group = json.dumps(f["pg_ranks"])
            got[(f["collective"], f["dtype"], f["in_nelems"], group)] += 1
    assert got == expected_kernels(doc)
    assert sum(got.values()) == 21  # 15 all-reduce + 6 broadcast kernels, every one named


def test_ranks_import_as_tasks_of_one_run_with_their_collectives_in_the_lake(
    tmp_path: Path,
) -> None:
    src = shared_traces() / OF2
    doc = raw(src)
    rank1 = with_rank(src, 1, tmp_path / "rank1.json.gz")
    data = tmp_path / "data"
    run, _ = import_files(Store(data, fsync=False), [src, rank1], "ddp")
    _done, failed = compact_data_dir(data, lake_of(data), collector_id(data))
    assert not failed
    con = Engine([str(data)]).connect()  # what ``sql`` and Spark read: the compacted lake
    kernels = "kernels"
    rows = con.execute(
        f"SELECT task, run, collective, coll_dtype, coll_in_nelems, coll_pg_ranks, "
        f"coll_group_size, coll_pg_name FROM {kernels} WHERE collective IS NOT NULL"
    ).fetchall()
    assert {(r[0], r[1]) for r in rows} == {("0", run), ("1", run)}
    for task in ("0", "1"):
        got = Counter((r[2], r[3], r[4], json.dumps(r[5])) for r in rows if r[0] == task)
        assert got == expected_kernels(doc)
    assert {(r[6], r[7]) for r in rows} == {(2, "0")}
    # One timeline: the same kernel starts at the same instant on both ranks.
    starts = con.execute(
        f"SELECT task, min(start_ns), max(start_ns + duration_ns) FROM {kernels} GROUP BY task"
    ).fetchall()
    assert len({(a, b) for _, a, b in starts}) == 1
    markers = "markers"
    issued = con.execute(
        f"SELECT collective, count(*) FROM {markers} WHERE task = '0' AND collective "
        "IS NOT NULL AND name = 'record_param_comms' GROUP BY collective ORDER BY collective"
    ).fetchall()
    want = Counter(
        e["args"]["Collective name"]
        for e in doc["traceEvents"]
        if e.get("name") == "record_param_comms" and "Collective name" in e.get("args", {})
    )
    assert dict(issued) == dict(want)


def test_steps_import_and_files_without_args_keep_their_old_shape(tmp_path: Path) -> None:
    src = shared_traces() / OF2
    rank1 = with_rank(src, 1, tmp_path / "rank1.json.gz")
    store = Store(tmp_path / "data", fsync=False)
    import_files(store, [src, rank1], "steps", as_steps=True)
    (job,) = store.load_jobs(["steps"])
    assert {s.task for s in job.streams} == {"0"}
    import_files(store, [shared_traces() / OF16], "of16")
    (job,) = store.load_jobs(["of16"])
    (stream,) = job.streams
    assert stream.task == "0" and not stream.records["collective"].any()


@pytest.mark.parametrize("rank", [3])
def test_a_single_ranked_file_is_its_rank(tmp_path: Path, rank: int) -> None:
    path = with_rank(shared_traces() / OF16, rank, tmp_path / "r.json.gz")
    store = Store(tmp_path / "data", fsync=False)
    import_files(store, [path], "one")
    (job,) = store.load_jobs(["one"])
    assert [s.task for s in job.streams] == [str(rank)]
