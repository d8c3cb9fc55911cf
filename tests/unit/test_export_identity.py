"""What a timeline file holds survives ``merge``: whose records they are (job, task, GPU),
the launch flows, the host counters and the device-memory counter, in both formats;
older files (their counter names, the .pftrace's process tracks) still read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.traces import shared_traces
from tests.unit.merge_rows import records
from tests.unit.sample_timeline import T0, sample_timeline
from tfprof.collector.export import write_timeline
from tfprof.collector.jobdata import HOST_COLUMNS, DeviceMeta, JobData, StreamData
from tfprof.collector.merged.whole import WholeTimeline as Timeline
from tfprof.collector.merged.whole import build_timeline
from tfprof.collector.store.importer import jobs_from_files
from tfprof.core.records import RecordKind
from tfprof.readers import read_trace

pftrace = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
FORMATS = (".json.gz", ".pftrace")


def merged_again(timeline: Timeline, path: Path) -> Timeline:
    """``timeline`` written to ``path`` and merged from it (``merge path``)."""
    write_timeline(timeline, path)
    return build_timeline(jobs_from_files([path], as_steps=True))


def counters(timeline: Timeline) -> dict[tuple[str, str], tuple[list[int], list[float]]]:
    procs = {p.pid: p.name for p in timeline.processes}
    return {
        (procs[c.pid], c.name): (c.time_ns.tolist(), c.values.astype(float).tolist())
        for c in timeline.counters
    }


@pytest.mark.parametrize("suffix", FORMATS)
def test_a_merged_file_of_several_jobs_merges_again_as_it_was(suffix: str, tmp_path: Path) -> None:
    traces = shared_traces()
    paths = [
        traces / "kineto-hta" / "simple_add.json.gz",
        traces / "kineto-hta" / "event_sync_multi_stream.json.gz",
        traces / "tf-timeline-ikhlestov" / "GPU_timeline_01.json",
    ]
    first = build_timeline(jobs_from_files(paths, as_steps=False))
    again = merged_again(first, tmp_path / f"jobs{suffix}")
    assert [p.name for p in again.processes] == [p.name for p in first.processes]
    assert [t.name for t in again.slices] == [t.name for t in first.slices]
    assert [len(t) for t in again.slices] == [len(t) for t in first.slices]
    # Correlation ids are unique within a process only: read as one stream, the jobs'
    # ids collided and most launches lost their flow (289 -> 10 in the merge).
    assert len(again.flows) == len(first.flows) == 150
    assert [j["name"] for j in again.metadata["jobs"]] == [
        "simple_add",
        "event_sync_multi_stream",
        "GPU_timeline_01",
    ]
    # grouped by physical GPU, the same records under other names: read back as they were
    by_gpu = build_timeline(jobs_from_files(paths, as_steps=False), group_by="gpu")
    again = merged_again(by_gpu, tmp_path / f"gpu{suffix}")
    assert [p.name for p in again.processes] == [p.name for p in first.processes]
    assert [len(t) for t in again.slices] == [len(t) for t in first.slices]
    assert len(again.flows) == len(first.flows)


def host_job(task: str, rows: list[dict[str, int]]) -> JobData:
    """Task ``task`` of job "train": ``rows`` and two host samples."""
    host = {c: np.array([3, 4], dtype=np.int64) for c in HOST_COLUMNS}
    host["time_ns"] = np.array([T0 + 5, T0 + 45], dtype=np.int64)
    host["cpu_percent"] = np.array([12.5, 99.0])
    stream = StreamData(job="train", run_id="r1", host="h1", pid=100, task=task,
                        strings=["", "k"], records=records(rows), host_samples=host)  # fmt: skip
    return JobData("train", "r1", [stream])


def kernel(device: int = 0) -> dict[str, int]:
    return {"kind": RecordKind.KERNEL, "start_ns": T0 + 7, "duration_ns": 80, "stream": 7,
            "device": device, "correlation": 1, "name": 1}  # fmt: skip


def memory_and_host_job() -> JobData:
    """Task 3 with host samples, allocations and releases on GPU 1 (a peak of 4000
    bytes), and a record that neither allocates nor releases."""
    memory = [(10, 1, 1000), (20, 1, 3000), (30, 2, 1000), (50, 2, 3000), (60, 0, 0)]
    rows = [kernel(device=1)]
    rows += [{"kind": RecordKind.MEMORY, "start_ns": T0 + t, "device": 1, "memory_op": op,
              "bytes": n} for t, op, n in memory]  # fmt: skip
    job = host_job("3", rows)
    job.streams[0].devices = {1: DeviceMeta(1, "GPU-one", "NVIDIA H100")}
    return job


@pytest.mark.parametrize("suffix", FORMATS)
def test_counters_and_identity_survive_merge(suffix: str, tmp_path: Path) -> None:
    first = build_timeline([memory_and_host_job()])
    again = merged_again(first, tmp_path / f"t{suffix}")
    assert counters(again) == counters(first)
    assert ("/job:train/task:3/cpu", "gpu:1 allocated_bytes") in counters(first)
    assert [p.name for p in again.processes] == [p.name for p in first.processes]
    peaks = again.metadata["host_side"]["memory_peak_bytes"]
    assert list(peaks["train"].values()) == [4000]  # the same peak, from the same steps
    # and once more: what was read back is what is written again
    assert counters(merged_again(again, tmp_path / f"u{suffix}")) == counters(first)


def test_ranks_recorded_apart_merge_into_one_job_side_by_side(tmp_path: Path) -> None:
    """Each rank's own file (its launcher wrote it) names job and task: merged, they are
    the tasks of one job, each on its own clock (they ran together, not one after the
    other, though the files overlap in time)."""
    paths = [
        write_timeline(build_timeline([host_job(rank, [kernel()])]), tmp_path / f"{rank}.json.gz")
        for rank in ("0", "1")
    ]
    (job,) = jobs_from_files(paths, as_steps=True)
    assert job.name == "train" and [s.task for s in job.streams] == ["0", "1"]
    timeline = build_timeline([job])
    starts = {t.name: int(t.start_ns[0]) for t in timeline.slices}
    assert starts == {  # 2 ns after the first host sample, in both
        "/job:train/task:0/gpu:0/stream:7": 2,
        "/job:train/task:1/gpu:0/stream:7": 2,
    }


def test_other_formats_are_named_after_the_file(tmp_path: Path) -> None:
    kineto = shared_traces() / "kineto-hta" / "simple_add.json.gz"
    (job,) = jobs_from_files([kineto], as_steps=True)
    assert job.name == "simple_add" and [s.task for s in job.streams] == ["0"]


def test_older_chrome_counter_names_read_back(tmp_path: Path) -> None:
    """Exports before the counters were named for the viewers wrote the series as both
    the event's name and its arg's key."""
    path = write_timeline(sample_timeline(), tmp_path / "new.json")
    doc = json.loads(path.read_text())
    series = {"cpu": "cpu_percent", "rss": "rss_bytes", "threads": "threads",
              "read": "read_bytes", "write": "write_bytes"}  # fmt: skip
    for e in doc["traceEvents"]:
        if e["ph"] == "C":
            name = series[e["name"]]
            e["name"], e["args"] = name, {name: next(iter(e["args"].values()))}
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    assert read_trace(old).host_samples == read_trace(path).host_samples
    (samples,) = read_trace(old).host_samples.values()
    assert samples["cpu_percent"] == [12.5, 99.0] and samples["rss_bytes"] == [1 << 30, 2 << 30]


def _old_pftrace(path: Path) -> Path:
    """A .pftrace as the export wrote it before it wrote named tracks: a process per
    pseudo-device, its lanes threads, counters under the host's process."""
    trace = pftrace.Trace()

    def packet(**fields: Any) -> Any:
        p = trace.packet.add(trusted_packet_sequence_id=1, **fields)
        return p

    first = packet(first_packet_on_sequence=True, sequence_flags=1, timestamp=0)
    first.clock_snapshot.clocks.add(clock_id=pftrace.BUILTIN_CLOCK_REALTIME, timestamp=T0)
    first.interned_data.event_names.add(iid=1, name="cudaLaunchKernel")
    first.interned_data.event_names.add(iid=2, name="gemm")
    first.interned_data.event_categories.add(iid=1, name="kernel")
    first.interned_data.event_categories.add(iid=2, name="cuda_api")
    first.interned_data.debug_annotation_names.add(iid=1, name="correlation")
    for uuid, pid, name in (
        (6, 2, "/job:old/task:5/gpu:0/stream:7"),
        (3, 1, "/job:old/task:5/cpu"),
    ):
        desc = packet().track_descriptor
        desc.uuid, desc.process.pid, desc.process.process_name = uuid, pid, name
    for uuid, pid, tid, name in ((4, 1, 1, "thread:42"), (10, 2, 3, "lane 0")):
        desc = packet().track_descriptor
        desc.uuid, desc.parent_uuid = uuid, 3 * pid
        desc.thread.pid, desc.thread.tid, desc.thread.thread_name = pid, tid, name
    desc = packet().track_descriptor
    desc.uuid, desc.parent_uuid, desc.name = 2, 3, "cpu_percent"
    desc.counter.unit_name = "%"
    begin, end = pftrace.TrackEvent.TYPE_SLICE_BEGIN, pftrace.TrackEvent.TYPE_SLICE_END
    for track, name_iid, cat, at, flows in ((4, 1, 2, 100, "out"), (10, 2, 1, 150, "in")):
        p = packet(timestamp=at, sequence_flags=2)
        event = p.track_event
        event.type, event.track_uuid, event.name_iid = begin, track, name_iid
        event.category_iids.append(cat)
        event.debug_annotations.add(name_iid=1, int_value=9)
        (event.flow_ids if flows == "out" else event.terminating_flow_ids).append(1)
        packet(timestamp=at + 20, sequence_flags=2).track_event.CopyFrom(
            pftrace.TrackEvent(type=end, track_uuid=track)
        )
    for at, value in ((90, 12.5), (200, 80.0)):
        p = packet(timestamp=at, sequence_flags=2)
        p.track_event.type = pftrace.TrackEvent.TYPE_COUNTER
        p.track_event.track_uuid, p.track_event.double_counter_value = 2, value
    path.write_bytes(trace.SerializeToString())
    return path


def test_the_older_pftrace_layout_reads_back(tmp_path: Path) -> None:
    trace = read_trace(_old_pftrace(tmp_path / "old.pftrace"))
    assert trace.tasks == [("old", "5")]
    kinds = sorted(zip(trace.columns["kind"], trace.columns["correlation"], strict=True))
    assert kinds == [(RecordKind.KERNEL, 9), (RecordKind.API, 9)]
    assert trace.origin_ns == T0 + 100
    assert trace.host_samples == {0: {"time_ns": [-10, 100], "cpu_percent": [12.5, 80.0]}}
    (job,) = jobs_from_files([tmp_path / "old.pftrace"], as_steps=True)
    assert job.name == "old" and job.streams[0].task == "5"
    timeline = build_timeline([job])
    assert len(timeline.flows) == 1
    assert [p.name for p in timeline.processes] == [
        "/job:old/task:5/gpu:0/stream:7",
        "/job:old/task:5/cpu",
    ]
