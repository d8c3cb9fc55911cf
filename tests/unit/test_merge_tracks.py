"""build_timeline: how streams, tasks, processes and devices become ordered tracks."""

from __future__ import annotations

from tfprof.collector.jobdata import JobData
from tfprof.collector.merged.whole import build_timeline
from tfprof.core.records import RecordKind

from .merge_rows import host, kernel, memcpy, memset, proc_names, stream


def test_sort_order_jobs_then_tasks_then_gpus() -> None:
    jobs = [
        JobData("zeta", "r1", [
            stream([kernel(0, 1, device=1)], job="zeta", task="10", pid=1),
            stream([kernel(0, 1), memcpy(2, 1)], job="zeta", task="2", pid=2,
                   host_samples=host([1])),
        ]),
        JobData("alpha", "r1", [stream([kernel(0, 1)], job="alpha", task="0", pid=3)]),
    ]  # fmt: skip
    tl = build_timeline(jobs)
    assert proc_names(tl) == [  # job order as given, tasks numerically, cpu last in task
        "/job:zeta/task:2/gpu:0/stream:7",
        "/job:zeta/task:2/gpu:0/memcpy",
        "/job:zeta/task:2/cpu",
        "/job:zeta/task:10/gpu:1/stream:7",
        "/job:alpha/task:0/gpu:0/stream:7",
    ]


def test_same_job_name_different_runs_never_merge() -> None:
    one = stream([kernel(0, 10)], run_id="r1")
    two = stream([kernel(5, 10)], run_id="r2")
    tl = build_timeline([JobData("train", "r1", [one]), JobData("train", "r2", [two])])
    assert proc_names(tl) == [
        "/job:train.r1/task:0/gpu:0/stream:7",
        "/job:train.r2/task:0/gpu:0/stream:7",
    ]
    assert [j["label"] for j in tl.metadata["jobs"]] == ["train.r1", "train.r2"]


def test_processes_sharing_a_task_get_their_own_tracks() -> None:
    parent = stream([kernel(0, 10)], pid=100)
    child = stream([kernel(5, 10)], pid=200)  # inherited RANK=0
    tl = build_timeline([JobData("train", "r1", [parent, child])])
    assert proc_names(tl) == [
        "/job:train/task:0.100/gpu:0/stream:7",
        "/job:train/task:0.200/gpu:0/stream:7",
    ]


def test_reconnected_process_streams_share_tracks() -> None:
    first = stream([kernel(0, 10, correlation=1)], strings=["", "a"])
    again = stream([kernel(20, 10, correlation=2), kernel(5, 10, correlation=3)],
                   strings=["", "x", "b"])  # fmt: skip
    again.records["name"][:] = [2, 1]
    tl = build_timeline([JobData("train", "r1", [first, again])])
    (t,) = tl.slices
    assert t.name == "/job:train/task:0/gpu:0/stream:7"
    assert t.column("correlation").tolist() == [1, 3, 2]
    assert t.lane.tolist() == [0, 1, 0]
    # names resolve through each stream's own string table
    assert [tl.names[i] for i in t.name_id.tolist()] == ["a", "x", "b"]


def test_gpu_only_task_counts_its_records_unlinked_as_with_api_calls() -> None:
    """A task without API calls or ranges skips linking; its counts are those a linked
    task would show for the same GPU records with nothing to link them to."""
    gpu = [kernel(0, 5, correlation=1), memcpy(10, 5, correlation=2), memset(20, 5),
           kernel(30, 5, correlation=0), {"kind": RecordKind.MEMORY, "start_ns": 40}]  # fmt: skip
    api = {"kind": RecordKind.API, "start_ns": 0, "duration_ns": 1, "thread": 9, "name": 2}
    for rows, linked in (
        (gpu, 0),
        ([*gpu, {**api, "correlation": 2}], 1),  # the copy's call: linked
        ([*gpu, {**api, "correlation": 99}], 0),  # a call that launched none of them
    ):
        tl = build_timeline([JobData("train", "r1", [stream(rows)])])
        flows = tl.metadata["host_side"]["flows"]
        assert flows == {"linked": linked, "unknown_correlation": 2, "missing_api": 2 - linked,
                         "ambiguous_api": 0, "by_launch": 0, "by_external_id": 0,
                         "by_node_name": 0, "unattributed": 4}  # fmt: skip
        assert tl.metadata["host_side"]["tasks"] == [{"job": "train", "task": "0", **flows}]
        assert len(tl.flows) == linked


def test_streams_and_devices_of_any_size_split_into_ordered_tracks() -> None:
    """Any stream id (32 bits) and device ordinal (16 bits, as the lake stores it) makes
    its own track, in numeric order."""
    for devices, streams in (((0, 1, 3), (7, 13, 2)), ((0, 65_535), (7, 1 << 31, 13))):
        rows = [kernel(10 * i, 5, stream=s, device=d)
                for i, (d, s) in enumerate((d, s) for s in streams for d in devices)]  # fmt: skip
        tl = build_timeline([JobData("train", "r1", [stream(rows)])])
        names = [t.name for t in tl.slices]
        expected = [f"/job:train/task:0/gpu:{d}/stream:{s}"
                    for d in sorted(devices) for s in sorted(streams)]  # fmt: skip
        assert names == expected
        for t in tl.slices:
            assert len(t) == 1 and t.column("device")[0] == t.key.gpu
            assert t.column("stream")[0] == t.key.stream
