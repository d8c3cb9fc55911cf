"""``capture --steps``: the steps each process stored since the capture began, read
through the read engine from the log and, once compacted, from the lake."""

from __future__ import annotations

from pathlib import Path

from tests.unit.lake_streams import KINDS, compact, first_batch, records_batch, write_stream
from tfprof.collector.commands.capture_steps import steps_recorded
from tfprof.core.records import RecordKind
from tfprof.proto import collector_pb2 as pb

KEY = ("train", "r1", "node-a", 42)


def capture(start_ns: int) -> pb.Capture:
    stream = pb.CaptureStream(job="train", run_id="r1", host="node-a", pid=42)
    return pb.Capture(capture_id="c1", start_ns=start_ns, streams=[stream])


def test_steps_since_the_capture_began_from_the_log_and_the_lake(tmp_path: Path) -> None:
    profiler = records_batch(3, 90_000, strings=["ProfilerStep#7"], string_base=3)
    kinds = [int(k) for k in profiler.records.kind]
    marker = kinds.index(RecordKind.MARKER)  # a host range with a thread: a replay's step
    profiler.records.name[marker] = 3
    d = tmp_path / "data"
    write_stream(d, [first_batch(), records_batch(2, 50_000, n=3 * KINDS), profiler])
    # One STEP record per KINDS records: 1 + 3 + 1, and the ProfilerStep#7 range.
    everything = {KEY: 6}
    late = {KEY: 2}  # the third batch's STEP record and range (the log's times + offset)
    for _ in ("log", "lake"):
        assert steps_recorded(str(d), capture(0)) == everything
        assert steps_recorded(str(d), capture(80_000)) == late
        assert steps_recorded(str(d), capture(1 << 62)) == {KEY: 0}
        compact(d)
    # A job of the capture not stored (yet) has no step; the others still count.
    missing = pb.CaptureStream(job="eval", host="x", pid=1)
    both = pb.Capture(start_ns=0, streams=[*capture(0).streams, missing])
    assert steps_recorded(str(d), both) == {**everything, ("eval", "", "x", 1): 0}
