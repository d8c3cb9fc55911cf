"""Per-job, per-GPU live figures (collector/service/live_figures.py) and their Prometheus families:
interval unions against a brute-force reference, per-GPU attribution by UUID, drops,
processes, and the bounds on label cardinality."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.unit.live_records import (
    T0,
    UUID0,
    brute_force_union,
    copy,
    hello,
    kernel,
    records,
)
from tfprof.collector.service.batch_figures import batch_figures, union_busy_ns
from tfprof.collector.service.ingest import IngestStream
from tfprof.collector.service.live_figures import OTHER, LiveAccounting
from tfprof.collector.service.metrics import LIVE_FAMILIES, CollectorMetrics
from tfprof.collector.store import Store
from tfprof.proto import collector_pb2 as pb

Columns = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def arrays(rows: list[tuple[int, int, int, int]]) -> Columns:
    """(device, stream, start, end) columns."""
    cols = np.array(rows, dtype=np.int64).reshape(-1, 4)
    return cols[:, 0], cols[:, 1], cols[:, 2], cols[:, 3]


def test_overlapping_kernels_of_one_stream_count_once_and_streams_add_up() -> None:
    rows = [
        (0, 7, 100, 200),  # stream 7: [100, 250) in all = 150
        (0, 7, 150, 250),
        (0, 7, 160, 170),  # inside the others: nothing more
        (0, 8, 150, 250),  # another stream counts on its own: 100
        (1, 7, 100, 110),  # another device: 10
    ]
    covered: dict[tuple[int, int], int] = {}
    assert union_busy_ns(*arrays(rows), covered) == {0: 250, 1: 10}
    assert covered == {(0, 7): 250, (0, 8): 250, (1, 7): 110}


def test_later_batches_count_only_past_what_each_stream_counted() -> None:
    covered: dict[tuple[int, int], int] = {}
    union_busy_ns(*arrays([(0, 7, 100, 200)]), covered)
    # 150..200 was counted already; 200..260 is new; a gap then 300..310.
    assert union_busy_ns(*arrays([(0, 7, 150, 260), (0, 7, 300, 310)]), covered) == {0: 70}
    assert union_busy_ns(*arrays([(0, 7, 120, 180)]), covered) == {0: 0}


@pytest.mark.parametrize(
    ("seed", "shape"),
    [
        (0, "in time order"),
        (1, "in time order"),
        (2, "shuffled within each batch"),
        (3, "large stream ids"),  # grouped by np.unique, not a small lookup table
        (4, "spread over centuries"),  # too long to lift: one stream at a time
    ],
)
def test_the_union_matches_a_brute_force_reference(seed: int, shape: str) -> None:
    rng = np.random.default_rng(seed)
    n = 2_000
    device = rng.integers(0, 3, n)
    stream = rng.integers(0, 4, n) * (1_000_003 if shape == "large stream ids" else 1)
    if shape == "spread over centuries":
        start = np.sort(rng.integers(0, 6 * 10**18, n))
    else:
        start = rng.integers(0, 1_000_000, n) + T0
    end = start + rng.integers(0, 5_000, n)
    # Fed in three batches cut in time order, as a stream delivers them.
    order = np.argsort(start, kind="stable")
    covered: dict[tuple[int, int], int] = {}
    got: dict[int, int] = {}
    for part in np.array_split(order, 3):
        if shape == "shuffled within each batch":
            part = rng.permutation(part)
        cols = device[part], stream[part], start[part], end[part]
        for d, ns in union_busy_ns(*cols, covered).items():
            got[d] = got.get(d, 0) + ns
    want: dict[int, int] = {}
    for d, s in {(int(d), int(s)) for d, s in zip(device, stream, strict=True)}:
        pick = (device == d) & (stream == s)
        intervals = list(zip(start[pick].tolist(), end[pick].tolist(), strict=True))
        want[d] = want.get(d, 0) + brute_force_union(intervals)
    assert got == want


def test_a_batch_is_counted_per_device_and_copy_direction() -> None:
    batch = records(
        kernel(0, 100),
        kernel(50, 100),
        kernel(0, 30, device=1),
        copy(1, 1000),
        copy(1, 24),
        copy(2, 500),
        copy(10, 7, device=1),
        {"kind": pb.MEMSET, "start_ns": T0, "duration_ns": 9, "device": 0},  # not a kernel
        {"kind": pb.API, "start_ns": T0, "duration_ns": 9},  # host side: not on a GPU
    )
    figures = batch_figures(batch, {})
    assert figures[0].busy_ns == 150 and figures[0].kernels == 2
    assert figures[0].copies == {"HtoD": 2, "DtoH": 1}
    assert figures[0].copy_bytes == {"HtoD": 1024, "DtoH": 500}
    assert figures[1].busy_ns == 30 and figures[1].kernels == 1
    assert figures[1].copies == {"PtoP": 1} and figures[1].copy_bytes == {"PtoP": 7}


def batch(seq: int, recs: pb.Records, **fields: object) -> pb.Batch:
    return pb.Batch(seq=seq, records=recs, **fields)  # type: ignore[arg-type]


def stream(store: Store, metrics: CollectorMetrics, msg: pb.Hello) -> IngestStream:
    ingest = IngestStream(store, metrics)
    ingest.hello(msg)
    return ingest


def test_ingest_feeds_the_families_by_job_and_gpu_uuid(tmp_path: Path) -> None:
    metrics, store = CollectorMetrics(), Store(tmp_path / "data")
    a = stream(store, metrics, hello("alpha", "s1", [pb.Device(ordinal=0, uuid=UUID0)]))
    b = stream(store, metrics, hello("beta", "s2"))
    a.batch(batch(1, records(kernel(0, 1_000_000), copy(1, 4096))))
    # A device named only in a later batch; a replayed batch (same seq) adds nothing.
    late = [pb.Device(ordinal=1, uuid="GPU-late")]
    a.batch(batch(2, records(kernel(0, 500_000, device=1)), devices=late, dropped=3))
    a.batch(batch(2, records(kernel(0, 500_000, device=1)), devices=late, dropped=3))
    b.batch(batch(1, records(kernel(0, 2_000_000), kernel(0, 2_000_000))))

    def value(name: str, **labels: str) -> float:
        return metrics.value(name, **{"host": "node-a", **labels})

    alpha0 = {"job": "alpha", "gpu_uuid": UUID0}
    assert value("tfprof_gpu_busy_seconds_total", **alpha0) == pytest.approx(0.001)
    assert value("tfprof_kernels_total", **alpha0) == 1
    assert value("tfprof_copies_total", **alpha0, direction="HtoD") == 1
    assert value("tfprof_copy_bytes_total", **alpha0, direction="HtoD") == 4096
    assert value("tfprof_kernels_total", job="alpha", gpu_uuid="GPU-late") == 1
    beta0 = {"job": "beta", "gpu_uuid": "node-a/gpu:0"}  # no UUID: named by host and ordinal
    assert value("tfprof_kernels_total", **beta0) == 2
    assert value("tfprof_gpu_busy_seconds_total", **beta0) == pytest.approx(0.002)
    assert metrics.value("tfprof_records_dropped_total", job="alpha", reason="queue") == 3
    assert metrics.value("tfprof_processes", job="alpha") == 1

    a.goodbye(pb.Goodbye(dropped_queue=5, dropped_tracer=2))
    a.close()
    assert metrics.value("tfprof_records_dropped_total", job="alpha", reason="queue") == 5
    assert metrics.value("tfprof_records_dropped_total", job="alpha", reason="tracer") == 2
    assert metrics.value("tfprof_processes", job="alpha") == 0
    b.close()


def test_every_family_is_exposed_with_its_help() -> None:
    text = CollectorMetrics().exposition().decode()
    for name, (kind, _doc, _labels) in LIVE_FAMILIES.items():
        exposed = f"{name}_total" if kind == "counter" else name
        assert f"# TYPE {exposed} {kind}" in text


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_finished_jobs_are_forgotten_after_the_retention() -> None:
    clock = FakeClock()
    live = LiveAccounting(retain_s=60, clock=clock)
    one, two = live.open_stream(hello("j")), live.open_stream(hello("j", "s2"))
    one.batch_stored(batch(1, records(kernel(0, 10))))
    one.close()
    clock.now += 120
    assert live.snapshot()["j"].processes == 1  # still streaming: kept
    two.close()
    clock.now += 59
    assert live.snapshot()["j"].gpus[("node-a", "node-a/gpu:0")].kernels == 1
    clock.now += 2
    assert "j" not in live.snapshot()


def test_past_the_job_bound_finished_jobs_make_room_then_other_takes_the_rest() -> None:
    live = LiveAccounting(max_jobs=2, clock=FakeClock())
    first = live.open_stream(hello("first"))
    first.close()
    live.open_stream(hello("second"))
    third = live.open_stream(hello("third"))  # "first" (finished) is forgotten for it
    assert sorted(live.snapshot()) == ["second", "third"]
    fourth = live.open_stream(hello("fourth"))  # nothing finished: counted under <other>
    fourth.batch_stored(batch(1, records(kernel(0, 10))))
    jobs = live.snapshot()
    assert sorted(jobs) == [OTHER, "second", "third"]
    assert jobs[OTHER].processes == 1 and jobs[OTHER].gpus
    third.close()


def test_past_the_gpu_bound_gpus_go_under_other() -> None:
    live = LiveAccounting(max_gpus=2)
    account = live.open_stream(hello("j"))
    account.batch_stored(batch(1, records(*(kernel(0, 10, device=d) for d in range(5)))))
    gpus = live.snapshot()["j"].gpus
    assert len(gpus) == 3
    assert gpus[("node-a", OTHER)].kernels == 3


def test_busy_is_the_gpu_union_of_kernels_copies_memsets_across_batches() -> None:
    """What summary and advise call GPU busy time, from batches in completion order:
    streams overlap each other (counted once), a copy on its own stream counts, a later
    batch holds records that started before earlier batches' ended."""
    import numpy as np

    from tests.unit.whole_intervals import merge_intervals
    from tfprof.collector.service.batch_figures import GpuUnion

    rng = np.random.default_rng(7)
    rows = []
    for stream in (7, 13, 14):  # each stream runs its work in order
        t = 0
        for _ in range(400):
            t += int(rng.integers(0, 50))
            d = int(rng.integers(1, 200))
            kind = pb.MEMCPY if stream == 14 else pb.KERNEL
            rows.append({"kind": kind, "start_ns": T0 + t, "duration_ns": d, "device": 0,
                         "stream": stream, "copy_kind": 1 if kind == pb.MEMCPY else 0})  # fmt: skip
            t += d
    rows.sort(key=lambda r: r["start_ns"] + r["duration_ns"])  # completion order
    covered: dict[tuple[int, int], int] = {}
    unions: dict[int, GpuUnion] = {}
    busy = stream_busy = 0
    for a in range(0, len(rows), 97):
        figures = batch_figures(records(*rows[a : a + 97]), covered, unions)
        busy += figures[0].busy_ns
        stream_busy += figures[0].stream_busy_ns
    start = np.array([r["start_ns"] for r in rows])
    end = start + np.array([r["duration_ns"] for r in rows])
    whole = merge_intervals(np.zeros(len(rows), np.int64), start, end, 1).busy
    assert busy == int(whole[0])
    kernels = [r for r in rows if r["kind"] == pb.KERNEL]
    per_stream = 0
    for s in (7, 13):
        mine = [r for r in kernels if r["stream"] == s]
        ks = np.array([r["start_ns"] for r in mine])
        ke = ks + np.array([r["duration_ns"] for r in mine])
        per_stream += int(merge_intervals(np.zeros(len(mine), np.int64), ks, ke, 1).busy[0])
    assert stream_busy == per_stream  # the per-stream figure, kept as stream_busy
