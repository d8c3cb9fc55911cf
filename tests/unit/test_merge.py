"""build_timeline: naming, clocks, windows, lanes and metadata, by hand (how tracks are
made and ordered: test_merge_tracks.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tfprof.collector.errors import InvalidArgument
from tfprof.collector.jobdata import HOST_COLUMNS, DeviceMeta, DropCounts, JobData
from tfprof.collector.merged.whole import build_timeline
from tfprof.collector.timeline.prepare import MergeError

from .merge_rows import host, kernel, memcpy, memset, proc_names, stream, track


def test_job_grouping_names_and_order() -> None:
    s = stream(
        [kernel(0, 10, stream=13), kernel(5, 10, stream=7), memcpy(20, 5, stream=7),
         memset(30, 5, stream=13), kernel(0, 3, device=1, stream=7)],
        host_samples=host([1, 2]),
    )  # fmt: skip
    tl = build_timeline([JobData("train", "r1", [s])])
    assert proc_names(tl) == [
        "/job:train/task:0/gpu:0/stream:7",
        "/job:train/task:0/gpu:0/stream:13",  # numeric, not string, order
        "/job:train/task:0/gpu:0/memcpy",
        "/job:train/task:0/gpu:1/stream:7",
        "/job:train/task:0/cpu",
    ]
    assert [p.sort_index for p in tl.processes] == [0, 1, 2, 3, 4]
    assert all(p.pid >= 1 for p in tl.processes)
    # every slice track is its own process in this grouping, named after it
    by_pid = {p.pid: p.name for p in tl.processes}
    assert all(by_pid[t.pid] == t.name for t in tl.slices)
    assert {t.name: len(t) for t in tl.slices} == {
        "/job:train/task:0/gpu:0/stream:7": 2,
        "/job:train/task:0/gpu:0/stream:13": 2,  # the memset stays on its stream
        "/job:train/task:0/gpu:0/memcpy": 1,
        "/job:train/task:0/gpu:1/stream:7": 1,
    }
    assert [c.name for c in tl.counters] == list(HOST_COLUMNS[1:])
    assert tl.group_by == "job"


def test_copies_on_their_stream_and_on_memcpy() -> None:
    s = stream([kernel(0, 10, correlation=1), memcpy(10, 5, correlation=2, stream=7),
                memcpy(12, 5, correlation=3, stream=13)])  # fmt: skip
    tl = build_timeline([JobData("train", "r1", [s])])
    corr = {t.name: t.column("correlation").tolist() for t in tl.slices}
    assert corr["/job:train/task:0/gpu:0/stream:7"] == [1, 2]
    assert corr["/job:train/task:0/gpu:0/stream:13"] == [3]
    assert corr["/job:train/task:0/gpu:0/memcpy"] == [2, 3]


def test_event_names() -> None:
    s = stream([kernel(0, 1, name=2), kernel(1, 1, name=0), kernel(2, 1, name=99),
                memcpy(3, 1, copy_kind=2), memcpy(4, 1, copy_kind=10),
                memcpy(5, 1, copy_kind=77), memset(6, 1)])  # fmt: skip
    tl = build_timeline([JobData("train", "r1", [s])])
    t = track(tl, "/job:train/task:0/gpu:0/stream:7")
    assert [tl.names[i] for i in t.name_id.tolist()] == [
        # an id past the string table reads as the lake stores it (compaction's placeholder)
        "relu_kernel", "unnamed kernel", "<unknown name 99>",
        "MEMCPYDtoH", "MEMCPYPtoP", "MEMCPYUnknown", "MEMSET",
    ]  # fmt: skip


def test_gpu_grouping_puts_jobs_on_their_physical_gpu() -> None:
    a100 = DeviceMeta(0, "GPU-aaaa", "NVIDIA A100")
    a = stream([kernel(0, 10)], job="a", devices={0: a100}, host_samples=host([5]))
    # job b sees the same physical GPU as ordinal 1 (CUDA_VISIBLE_DEVICES renumbering)
    b = stream([kernel(2, 10, device=1, stream=7), memcpy(20, 5, device=1, stream=9),
                kernel(0, 4, device=3)],
               job="b", pid=200, devices={1: DeviceMeta(1, "GPU-aaaa", "NVIDIA A100")})  # fmt: skip
    tl = build_timeline([JobData("a", "r1", [a]), JobData("b", "r2", [b])], group_by="gpu")
    assert proc_names(tl) == ["/gpu:GPU-aaaa (NVIDIA A100)", "/gpu:h1/gpu:3", "/job:a/task:0/cpu"]
    gpu = next(p for p in tl.processes if p.name.startswith("/gpu:GPU-aaaa"))
    on_gpu = [t for t in tl.slices if t.pid == gpu.pid]
    threads = [
        (name, tid) for t in on_gpu for name, tid in zip(t.thread_names, t.thread_ids, strict=True)
    ]
    assert [name for name, _ in threads] == [
        "/job:a/task:0/gpu:0/stream:7",
        "/job:b/task:0/gpu:1/stream:7",
        "/job:b/task:0/gpu:1/stream:9",
        "/job:b/task:0/gpu:1/memcpy",
    ]
    assert [tid for _, tid in threads] == sorted(tid for _, tid in threads)
    all_tids = [tid for t in tl.slices for tid in t.thread_ids] + [c.tid for c in tl.counters]
    assert len(set(all_tids) - {tl.counters[0].tid}) == len(all_tids) - len(tl.counters)
    assert min(all_tids) >= 1


def test_gpu_grouping_names_extra_lanes() -> None:
    s = stream([kernel(0, 10), kernel(5, 10)], devices={0: DeviceMeta(0, "GPU-x")})
    tl = build_timeline([JobData("train", "r1", [s])], group_by="gpu")
    (t,) = tl.slices
    assert t.thread_names == (
        "/job:train/task:0/gpu:0/stream:7",
        "/job:train/task:0/gpu:0/stream:7 lane 1",
    )
    assert proc_names(tl) == ["/gpu:GPU-x"]


def test_overlapping_slices_split_into_lanes_in_the_timeline() -> None:
    s = stream([kernel(100, 50, correlation=1), kernel(120, 10, correlation=2),
                kernel(200, 10, correlation=3), kernel(90, 5, stream=13)])  # fmt: skip
    tl = build_timeline([JobData("train", "r1", [s])])
    busy = track(tl, "/job:train/task:0/gpu:0/stream:7")
    assert busy.thread_names == ("lane 0", "lane 1")
    assert busy.lane.tolist() == [0, 1, 0]
    assert busy.column("correlation").tolist() == [1, 2, 3]
    quiet = track(tl, "/job:train/task:0/gpu:0/stream:13")
    assert quiet.thread_names == ("lane 0",) and quiet.lane.tolist() == [0]


def test_unsorted_input_is_sorted_per_track() -> None:
    s = stream([kernel(300, 5, correlation=3), kernel(100, 5, correlation=1),
                kernel(200, 5, correlation=2)])  # fmt: skip
    tl = build_timeline([JobData("train", "r1", [s])])
    (t,) = tl.slices
    assert t.start_ns.tolist() == [0, 100, 200]
    assert t.column("correlation").tolist() == [1, 2, 3]


def test_times_relative_to_earliest_event_after_shifts() -> None:
    # a's kernel starts at 5000 on its clock, shifted +1000 -> 6000 on the collector's;
    # b's starts at 7000, shifted -2000 -> 5000: b is first although its raw time is later.
    a = stream([kernel(5000, 100)], task="0", record_shift_ns=1000)
    b = stream([kernel(7000, 100), memcpy(7500, 10)], task="1", pid=101, record_shift_ns=-2000,
               host_samples=host([5600, 5700]), host_shift_ns=-500)  # fmt: skip
    tl = build_timeline([JobData("train", "r1", [a, b])])
    assert tl.origin_ns == 5000
    assert track(tl, "/job:train/task:0/gpu:0/stream:7").start_ns.tolist() == [1000]
    assert track(tl, "/job:train/task:1/gpu:0/stream:7").start_ns.tolist() == [0, 500]
    assert track(tl, "/job:train/task:1/gpu:0/memcpy").start_ns.tolist() == [500]
    assert tl.counters[0].time_ns.tolist() == [100, 200]  # 5600-500-5000, 5700-500-5000


def test_host_sample_can_be_the_earliest_event() -> None:
    s = stream([kernel(1000, 10)], host_samples=host([400, 2000]), host_shift_ns=100)
    tl = build_timeline([JobData("train", "r1", [s])])
    assert tl.origin_ns == 500
    assert tl.slices[0].start_ns.tolist() == [500]
    assert tl.counters[0].time_ns.tolist() == [0, 1600]


def test_window_keeps_overlapping_slices_and_inner_samples() -> None:
    s = stream([kernel(0, 10, correlation=1), kernel(20, 10, correlation=2),
                kernel(40, 10, correlation=3), kernel(60, 10, correlation=4),
                kernel(25, 0, correlation=5)],
               record_shift_ns=1000, host_samples=host([1010, 1030, 1050]))  # fmt: skip
    # the window is on the shifted clock: (1025, 1041) catches slices 2 (overlaps),
    # 3 (starts inside) and the instant 5; not 1 (ended) nor 4 (starts after)
    tl = build_timeline([JobData("train", "r1", [s])], window_ns=(1025, 1041))
    (t,) = tl.slices
    assert sorted(t.column("correlation").tolist()) == [2, 3, 5]
    assert tl.origin_ns == 1020  # the earliest exported event, not the window start
    assert t.start_ns.tolist() == [0, 5, 20]
    assert tl.counters[0].time_ns.tolist() == [10]  # 1030 only
    jobs = tl.metadata["jobs"]
    assert jobs[0]["records"]["total"] == 3
    assert jobs[0]["tasks"][0]["records_outside_window"] == 2
    assert tl.metadata["window_ns"] == [1025, 1041]


def test_open_ended_windows() -> None:
    s = stream([kernel(0, 10), kernel(20, 10), kernel(40, 10)])
    assert len(build_timeline([JobData("j", "r", [s])], window_ns=(None, 20)).slices[0]) == 1
    assert len(build_timeline([JobData("j", "r", [s])], window_ns=(21, None)).slices[0]) == 2
    assert len(build_timeline([JobData("j", "r", [s])], window_ns=(None, None)).slices[0]) == 3


def test_window_that_keeps_nothing() -> None:
    s = stream([kernel(0, 10)], host_samples=host([5]))
    tl = build_timeline([JobData("j", "r", [s])], window_ns=(100, 200))
    assert tl.slices == () and tl.counters == () and tl.processes == ()
    assert tl.origin_ns == 0


def test_bad_options_raise() -> None:
    s = stream([kernel(0, 10)])
    with pytest.raises(MergeError, match="starts after it ends"):
        build_timeline([JobData("j", "r", [s])], window_ns=(10, 5))
    with pytest.raises(MergeError, match="group_by"):
        bad: Any = "host"
        build_timeline([JobData("j", "r", [s])], group_by=bad)
    broken = stream([kernel(0, 10)])
    del broken.records["bytes"]
    with pytest.raises(MergeError, match="bytes"):
        build_timeline([JobData("j", "r", [broken])])
    assert issubclass(MergeError, InvalidArgument)  # the CLI reports it and exits 2


def test_negative_durations_are_clamped_and_counted() -> None:
    s = stream([kernel(0, -5), kernel(10, 5)])
    tl = build_timeline([JobData("train", "r1", [s])])
    assert tl.slices[0].duration_ns.tolist() == [0, 5]
    assert tl.metadata["clamped_negative_durations"] == 1


def test_metadata() -> None:
    dev = DeviceMeta(0, "GPU-1234", "NVIDIA H100", "0000:3b:00.0", (9, 0), 132, 80 << 30)
    a = stream(
        [kernel(1000, 10), kernel(1100, 10), memcpy(1200, 50), memset(1300, 1)],
        argv=["python", "train.py"], source="cupti", devices={0: dev},
        record_shift_ns=7, clock_rtt_ns=300, host_shift_ns=3,
        dropped=DropCounts(queue=1, tracer=2, relay=3), finished=True, exit_code=0,
    )  # fmt: skip
    b = stream([kernel(900, 10)], task="1", pid=101, host="h2", dropped=DropCounts(relay=4))
    other = stream([], job="eval", dropped=DropCounts(tracer=10), finished=True)
    tl = build_timeline([JobData("train", "r1", [a, b]), JobData("eval", "r9", [other])])
    md = tl.metadata
    assert md["tool"]["name"] == "tfprof-agent" and md["tool"]["version"]
    assert md["group_by"] == "job"
    assert md["origin_ns"] == 900
    assert md["dropped"] == {"queue": 1, "tracer": 12, "relay": 7, "total": 20}
    train, ev = md["jobs"]
    assert (train["name"], train["run_id"], train["label"]) == ("train", "r1", "train")
    assert train["hosts"] == ["h1", "h2"]
    assert train["finished"] is False  # b has not said goodbye
    assert ev["finished"] is True
    assert train["records"] == {"kernel": 3, "memcpy": 1, "memset": 1, "api": 0, "marker": 0,
                                "memory": 0, "other": 0, "total": 5, "gpu": 5}  # fmt: skip
    assert train["time_range_ns"] == [900, 1308]
    assert train["dropped"] == {"queue": 1, "tracer": 2, "relay": 7, "total": 10}
    t0 = train["tasks"][0]
    assert t0["task"] == "0" and t0["pid"] == 100 and t0["host"] == "h1"
    assert t0["argv"] == ["python", "train.py"] and t0["source"] == "cupti"
    assert t0["exit_code"] == 0 and t0["finished"] is True
    assert t0["dropped"]["total"] == 6
    assert t0["time_range_ns"] == [1007, 1308]
    assert md["devices"]["train"]["0"]["0"] == {
        "uuid": "GPU-1234",
        "name": "NVIDIA H100",
        "pci_bus_id": "0000:3b:00.0",
        "compute_capability": "9.0",
        "sm_count": 132,
        "memory_bytes": 80 << 30,
    }
    assert md["clocks"][0] == {"job": "train", "task": "0", "host": "h1", "pid": 100,
                               "record_shift_ns": 7, "host_shift_ns": 3,
                               "clock_rtt_ns": 300}  # fmt: skip
    assert ev["records"]["total"] == 0 and ev["time_range_ns"] is None


def test_empty_input() -> None:
    tl = build_timeline([])
    assert tl.slices == () and tl.processes == () and tl.metadata["jobs"] == []
    assert tl.num_slices == 0
