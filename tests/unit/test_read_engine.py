"""The read engine (``tfprof.collector.read``) however the records are cut into chunks.

Its carried unions must give what the whole-column interval rules (``whole_intervals``)
give; its GPU views must give the same JSON read with every process in one chunk and
with chunks small enough that state is carried often, on the shipped traces (log tails,
compacted segments, both at once, windows that clip at both ends, several processes and
jobs); compacted segments read as the logs they came from. What the views show on the
shipped traces is pinned by the golden test (test_golden_outputs.py)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import orjson
import pytest

from tests.traces import shared_traces
from tests.unit.read_compare import engine_json, logs_and_compacted, quiet, whole_and_chunked
from tests.unit.whole_intervals import covered, gaps, merge_intervals
from tfprof.collector.lake.reader import open_jobs
from tfprof.collector.read.carried_unions import NEVER, Unions
from tfprof.collector.store import Store
from tfprof.collector.store.traced_windows import union_ns
from tfprof.collector.timeline.prepare import task_labels

VIEWS = ("jobs", "kernels", "kernels-by-job", "streams", "gpus", "memcpy")


def _cuts(rng: np.random.Generator, n: int) -> list[int]:
    return sorted({0, n, *rng.integers(0, n, int(rng.integers(0, 15))).tolist()})


@pytest.mark.parametrize("seed", range(40))
def test_carried_unions_give_the_whole_column_unions_gaps_and_cover(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, keys = int(rng.integers(1, 3000)), int(rng.integers(1, 6))
    s = np.sort(rng.integers(0, n * int(rng.integers(1, 80)), n))
    # Zero-length records split gaps; many touch or nest.
    e = s + np.where(rng.random(n) < 0.05, 0, rng.integers(0, int(rng.integers(1, 500)), n))
    k = rng.integers(0, keys, n)
    lo, hi = int(s.min()) - 3, int(e.max()) + 3
    merged = merge_intervals(k, s, e, keys)
    idle = gaps(merged, np.full(keys, lo), np.full(keys, hi))
    ranked = np.lexsort((idle.start, -idle.length, idle.group))
    q = int(rng.integers(1, 200))
    qs = np.sort(rng.integers(lo, hi, q))
    qe = np.minimum(qs + rng.integers(0, 300, q), hi)
    qk = rng.integers(0, keys, q)
    unions = Unions(keys, lo, hi, top_gaps=3)
    unions.answers = np.zeros(q, dtype=np.int64)
    for a, b in itertools.pairwise(_cuts(rng, n)):
        bound = int(s[b]) if b < n else NEVER
        # What starts in this chunk is asked before the chunk is fed.
        first = np.searchsorted(qs, int(s[a]) if a else np.iinfo(np.int64).min)
        asked = np.arange(first, np.searchsorted(qs, bound))
        unions.ask(qk[asked], qe[asked], asked, +1)
        unions.ask(qk[asked], qs[asked], asked, -1)
        unions.feed(k[a:b], s[a:b], e[a:b], bound)
    busy, (gk, gs, gl) = unions.finish()
    assert busy.tolist() == merged.busy.tolist()
    for key in range(keys):
        mine = ranked[idle.group[ranked] == key][:3]
        assert gs[gk == key].tolist() == idle.start[mine].tolist()
        assert gl[gk == key].tolist() == idle.length[mine].tolist()
    assert unions.answers.tolist() == covered(merged, qk, qs, qe).tolist()


def test_unions_of_a_span_too_long_to_key_at_once() -> None:
    """Islands carried from years before the chunk, over many keys: one running
    maximum per key instead of one keyed maximum (which would overflow int64)."""
    keys = 40
    s = np.array([0, 10**17, 2 * 10**17, 3 * 10**17] * keys, dtype=np.int64)
    k = np.repeat(np.arange(keys), 4)
    order = np.argsort(s, kind="stable")
    s, k = s[order], k[order]
    e = s + 5
    unions = Unions(keys, 0, int(e.max()))
    unions.feed(k[: keys * 2], s[: keys * 2], e[: keys * 2], int(s[keys * 2]))
    unions.feed(k[keys * 2 :], s[keys * 2 :], e[keys * 2 :], NEVER)
    assert unions.finish()[0].tolist() == [20] * keys


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped traces imported as jobs (their records in the logs: tails)."""
    traces = shared_traces()
    d = tmp_path_factory.mktemp("read") / "data"
    tf, kineto = traces / "tf-timeline-ikhlestov", traces / "kineto-hta"
    for job, files, extra in (
        ("steps", sorted(tf.glob("GPU_timeline_02_step_*.json")), []),
        ("merged5", [tf / "GPU_timeline_03_merged_5_runs.json"], []),
        ("sync", [kineto / "event_sync_multi_stream.json.gz"], []),
        ("add", [kineto / "simple_add.json.gz"], []),
        (
            "tasks",
            [kineto / "simple_add.json.gz", kineto / "event_sync_multi_stream.json.gz"],
            ["--as", "tasks"],
        ),
    ):
        quiet(["import", "--data-dir", str(d), "--job", job, *map(str, files), *extra])
    return d


CASES: dict[str, tuple[list[str], str | None, str | None]] = {
    "steps": (["steps"], None, None),
    "merged5, a window": (["merged5"], "+5ms", "+120ms"),
    "sync": (["sync"], None, None),
    "add, a window": (["add"], "+1s", "+30s"),
    "two processes": (["tasks"], None, None),
    "two jobs": (["add", "tasks"], None, None),
}


def _check_jobs_view(data_dirs: list[str], jobs: list[str], text: str) -> None:
    """The jobs view's figures that the engine defines (issue 27 item 2: records are the
    run's, whole, beside the window's GPU records; a process is a task label, streams of
    one process are one) against the stored streams."""
    stored = open_jobs(data_dirs, jobs)
    for row in orjson.loads(text)["rows"]:
        job = next(j for j in stored.jobs if row["job"] in (j.name, f"{j.name}.{j.run_id}"))
        assert row["processes"] == len(set(task_labels(job)))
        assert row["records"] >= row["gpu_records"] > 0
        assert row["source"] == ",".join(sorted({s.source for s in job.streams}))
        windows = [(a, b) for s in job.streams for _, _, a, b in s.capture_windows]
        assert row["captured_us"] == round(union_ns(windows) / 1000, 3) > 0


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("case", list(CASES))
def test_views_give_the_same_json_in_small_chunks(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, view: str, case: str
) -> None:
    jobs, since, until = CASES[case]
    # Chunks of 64 rows: state carried often.
    whole, chunked = whole_and_chunked(monkeypatch, 64, [str(data_dir)], jobs, since, until, view)
    # A case without rows would prove little: only the one trace without copies has none.
    assert '"rows":[]' not in whole.replace(" ", "") or (case, view) == ("sync", "memcpy")
    assert chunked == whole
    if view == "jobs":
        _check_jobs_view([str(data_dir)], jobs, whole)


def test_views_read_segments_and_tails_alike(data_dir: Path, tmp_path: Path) -> None:
    """Compacted into the lake, then one more run in the log: both sources at once, read
    as the same data dir never compacted (log tails only)."""
    tf = shared_traces() / "tf-timeline-ikhlestov" / "GPU_timeline_01.json"
    logs, both = logs_and_compacted(data_dir, tmp_path, tf, "steps")
    assert list((both / "lake").glob("kernels/**/*.parquet"))
    assert not list((logs / "lake").glob("kernels/**/*.parquet"))
    for view in VIEWS:
        compacted = engine_json([str(both)], ["steps"], None, None, view)
        assert compacted == engine_json([str(logs)], ["steps"], None, None, view), view
        assert '"rows":[]' not in compacted.replace(" ", ""), view


def _gpu_only_data_dir(d: Path, seed: int) -> None:
    """One process's GPU records in batches, in completion order (as CUPTI delivers
    them), the first half compacted into the lake, the rest left in the log (a tail)."""
    from tfprof.collector.lake.location import lake_of
    from tfprof.collector.lake.publish import compact_data_dir
    from tfprof.collector.lake.segments import collector_id
    from tfprof.proto import collector_pb2 as pb

    rng = np.random.default_rng(seed)
    n = 6000
    kind = rng.choice([1, 1, 1, 2, 3, 4], n)
    start = 10**18 + np.sort(rng.integers(0, 50_000_000, n))
    duration = np.where(rng.random(n) < 0.02, 0, rng.integers(1, 40_000, n))
    columns = {
        "kind": kind,
        "start_ns": start,
        "duration_ns": duration,
        "stream": rng.choice([7, 13, 14], n),
        "device": rng.integers(0, 2, n),
        "correlation": np.arange(1, n + 1),
        "name": np.where(kind == 1, rng.integers(1, 4, n), 0),
        "bytes": np.where(kind > 1, rng.integers(1, 1 << 20, n), 0),
        "copy_kind": np.where(kind == 2, rng.choice([1, 2, 8], n), 0),
        "src_kind": np.where(kind == 2, 2, 0),
        "dst_kind": np.where(kind == 2, 3, 0),
        "sync_type": np.where(kind == 4, 3, 0),
    }
    done = np.argsort(start + duration, kind="stable")
    devices = [pb.Device(ordinal=o, uuid=f"GPU-{seed}-{o}", name="test") for o in (0, 1)]
    hello = pb.Hello(protocol_version=1, job="gpu", run_id="r1", host="h", pid=7, task="0",
                     stream_id="s0", devices=devices)  # fmt: skip
    store = Store(d, fsync=False)
    writer = store.open_stream(hello)
    for seq, a in enumerate(range(0, n, 1000), start=1):
        batch = pb.Batch(seq=seq)
        if seq == 1:
            batch.string_base = 1
            batch.strings.extend(["k_a", "k_b", "k_c"])
        rows = done[a : a + 1000]
        for c, values in columns.items():
            getattr(batch.records, c).extend(values[rows].tolist())
        writer.append(batch)
        if seq == 3:
            compact_data_dir(d, lake_of(d), collector_id(d))
    writer.finish(pb.Goodbye(records_sent=n))
    writer.close()


@pytest.mark.parametrize("seed", range(3))
def test_compaction_writes_sorted_segments_the_read_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    import pyarrow.parquet as pq

    from tfprof.collector.lake.arrays import numbers

    d = tmp_path / "data"
    _gpu_only_data_dir(d, seed)
    files = sorted((d / "lake").glob("kernels/**/*.parquet"))
    assert files
    for path in files:
        meta = pq.ParquetFile(path).metadata
        at = meta.schema.to_arrow_schema().get_field_index("start_ns")
        for i in range(meta.num_row_groups):
            assert [c.column_index for c in meta.row_group(i).sorting_columns] == [at]
        starts = numbers(pq.read_table(path, columns=["start_ns"]).column(0))
        assert (np.diff(starts) >= 0).all()
    # Sorted row groups stream a batch at a time: small batches and chunks carry the
    # merge's state across many boundaries, beside a tail read whole.
    for view in VIEWS:
        for since, until in ((None, None), ("+10ms", "+30ms")):
            whole, chunked = whole_and_chunked(
                monkeypatch, 101, [str(d)], ["gpu"], since, until, view, batch_rows=37
            )
            assert chunked == whole, view
            assert '"rows":[]' not in whole.replace(" ", ""), view
