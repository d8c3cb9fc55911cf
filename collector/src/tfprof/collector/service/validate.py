"""Checks on everything an agent sends, before any of it is written.

A batch is validated whole and only then stored, so a bad batch leaves nothing behind.
Pure functions over protos; errors are ``InvalidArgument`` with a message for the user.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from tfprof.collector.errors import InvalidArgument
from tfprof.collector.store.loader import record_shift
from tfprof.core.names import check_name
from tfprof.proto import collector_pb2 as pb

RECORD_FIELDS = [f.name for f in pb.Records.DESCRIPTOR.fields]
HOST_FIELDS = [f.name for f in pb.HostSamples.DESCRIPTOR.fields]
FRAME_FIELDS = ["frame_file", "frame_line", "frame_function", "frame_first_line"]
NODE_FIELDS = ["node_parent", "node_frame"]
SAMPLE_FIELDS = ["time_ns", "thread", "stack", "correlation", "kind"]
STACK_KINDS = frozenset(v for v in pb.StackKind.values() if v != 0)
# Python frames and stack nodes a stream may intern (the hook stops well before).
MAX_FRAMES = 1 << 20
MAX_NODES = 1 << 22
# Known record kinds: whatever the compiled proto declares, except UNSPECIFIED.
RECORD_KINDS = frozenset(v for v in pb.RecordKind.values() if v != 0)

NS_PER_DAY = 86_400 * 10**9
# Timestamps are nanoseconds since 1970 on some host clock; anything from year 2200 on is
# garbage (7.26e18, still inside int64), as is anything negative.
MAX_TIME_NS = 7_258_118_400 * 10**9  # 2200-01-01T00:00:00Z
# Hosts disagree by seconds, not years; the bound also keeps shifted times in int64.
MAX_CLOCK_OFFSET_NS = 365 * 86_400 * 10**9
# Names a stream may intern: kernels of a big framework number thousands, not millions;
# the bound keeps a hostile string_base from blowing up every later load of the job.
MAX_STRINGS = 1 << 20
MAX_DURATION_NS = NS_PER_DAY
INT64_MAX = 2**63 - 1
# Each value may be in range while what readers derive from them is not (a realtime and
# tracer snapshot of opposite signs): the stream's shift is bounded as well.
MAX_SHIFT_NS = MAX_TIME_NS + MAX_CLOCK_OFFSET_NS
# uint64 fields readers hold as int64 (numpy columns, sums in the trace metadata).
UINT64_RECORD_FIELDS = ("bytes", "thread", "external_id", "address")
UINT64_HOST_FIELDS = ("rss_bytes", "read_bytes", "write_bytes")
MAX_TEXT = 256  # host, task, agent version, source
# A stream's secret: enough random bytes that nobody guesses them (the agent makes 32).
STREAM_SECRET_BYTES = (16, 64)
MAX_ARGV_BYTES = 64 << 10


@dataclass(frozen=True)
class BatchStats:
    records: int
    first_start_ns: int | None  # raw, before the stream's clock shift
    last_end_ns: int | None


def _check_text(what: str, value: str, required: bool = False) -> None:
    if required and not value:
        raise InvalidArgument(f"{what} is empty")
    if len(value) > MAX_TEXT:
        raise InvalidArgument(f"{what} is {len(value)} characters long, at most {MAX_TEXT}")
    if not value.isprintable():
        raise InvalidArgument(f"{what} {value[:64]!r} contains control characters")


def check_hello(hello: pb.Hello) -> None:
    """Everything but the protocol version (which gets its own status code)."""
    check_name("job name", hello.job)
    check_name("run id", hello.run_id)
    check_name("stream id", hello.stream_id)
    _check_text("host", hello.host, required=True)
    _check_text("task", hello.task)
    _check_text("agent version", hello.agent_version)
    _check_text("source", hello.source)
    _check_text("user", hello.user)
    low, high = STREAM_SECRET_BYTES
    if not low <= len(hello.stream_secret) <= high:
        raise InvalidArgument(
            f"stream secret of {len(hello.stream_secret)} bytes: a hello carries {low} to "
            f"{high} random bytes of its stream's own"
        )
    if sum(len(a) for a in hello.argv) > MAX_ARGV_BYTES:
        raise InvalidArgument(f"argv longer than {MAX_ARGV_BYTES} characters")
    _check_clock(hello.clock_offset_ns, hello.clock_rtt_ns)
    for name, value in (
        ("clock snapshot realtime", hello.clock.realtime_ns),
        ("clock snapshot tracer time", hello.clock.tracer_ns),
        ("clock snapshot monotonic time", hello.clock.monotonic_ns),
    ):
        if abs(value) > MAX_TIME_NS:
            raise InvalidArgument(f"{name} {value} ns is out of range")
    shift = record_shift(hello)
    if abs(shift) > MAX_SHIFT_NS:
        raise InvalidArgument(
            f"clock snapshot realtime {hello.clock.realtime_ns} ns and tracer time "
            f"{hello.clock.tracer_ns} ns put record times {shift} ns away, out of range"
        )
    _check_devices(hello.devices)


def check_goodbye(goodbye: pb.Goodbye) -> None:
    """Counts readers add up must stay in int64, alone and together."""
    counts = {
        "records_sent": goodbye.records_sent,
        "dropped_queue": goodbye.dropped_queue,
        "dropped_tracer": goodbye.dropped_tracer,
        "dropped_relay": goodbye.dropped_relay,
    }
    if sum(counts.values()) > INT64_MAX:
        raise InvalidArgument(f"goodbye counts out of range: {counts}")


def _check_shifted(what: str, low: int, high: int, shift_ns: int) -> None:
    if low + shift_ns < -INT64_MAX or high + shift_ns > INT64_MAX:
        raise InvalidArgument(f"{what} {high} ns moved by the stream's clock shift "
                              f"{shift_ns} ns is out of range")  # fmt: skip


def _check_uint64(what: str, msg: object, fields: tuple[str, ...]) -> None:
    for name in fields:
        values = getattr(msg, name)
        if len(values) and max(values) > INT64_MAX:
            raise InvalidArgument(f"{what} {name} {max(values)} is out of range")


def _check_clock(offset_ns: int, rtt_ns: int) -> None:
    if abs(offset_ns) > MAX_CLOCK_OFFSET_NS:
        raise InvalidArgument(f"clock offset {offset_ns} ns is over a year")
    if rtt_ns < 0:
        raise InvalidArgument(f"negative clock round trip {rtt_ns} ns")
    if rtt_ns > MAX_CLOCK_OFFSET_NS:
        raise InvalidArgument(f"clock round trip {rtt_ns} ns is out of range")


def _check_devices(devices: Iterable[pb.Device]) -> None:
    for d in devices:
        _check_text("device uuid", d.uuid)
        _check_text("device name", d.name)
        _check_text("device PCI bus id", d.pci_bus_id)


def _check_columns(msg: object, fields: list[str], what: str, sparse: bool) -> int:
    """All columns as long as the first; with ``sparse``, empty ones (all zero) too."""
    lengths = {name: len(getattr(msg, name)) for name in fields}
    n = lengths[fields[0]]
    bad = {k: v for k, v in lengths.items() if v != n and not (sparse and v == 0)}
    if bad:
        raise InvalidArgument(f"{what} columns have different lengths: {bad}, expected {n}")
    return n


def _check_times(what: str, times: np.ndarray) -> None:
    low, high = int(times.min()), int(times.max())
    if low < 0:
        raise InvalidArgument(f"negative {what} {low}")
    if high >= MAX_TIME_NS:
        raise InvalidArgument(f"{what} {high} ns is after the year 2200")


def _check_stacks(stacks: pb.Stacks, shift_ns: int) -> None:
    """Tables of one length each, ids within bounds, times in range, known kinds."""
    frames = _check_columns(stacks, FRAME_FIELDS, "stack frame", sparse=False)
    nodes = _check_columns(stacks, NODE_FIELDS, "stack node", sparse=False)
    samples = _check_columns(stacks, SAMPLE_FIELDS, "stack sample", sparse=True)
    if (frames and not stacks.frame_base) or stacks.frame_base + frames > MAX_FRAMES:
        raise InvalidArgument(f"stack frames {stacks.frame_base}+{frames} out of range "
                              f"(ids 1 to {MAX_FRAMES:,} per stream)")  # fmt: skip
    if (nodes and not stacks.node_base) or stacks.node_base + nodes > MAX_NODES:
        raise InvalidArgument(f"stack nodes {stacks.node_base}+{nodes} out of range "
                              f"(ids 1 to {MAX_NODES:,} per stream)")  # fmt: skip
    if stacks.dropped_samples > INT64_MAX:
        raise InvalidArgument(f"dropped sample count {stacks.dropped_samples} is out of range")
    _check_uint64("stack sample", stacks, ("thread",))
    if not samples:
        return
    if any(len(getattr(stacks, f)) != samples for f in ("time_ns", "stack", "kind")):
        raise InvalidArgument("stack samples without a time, a stack or a kind")
    times = np.array(stacks.time_ns, dtype=np.int64)
    _check_times("stack sample time_ns", times)
    _check_shifted("stack sample time", int(times.min()), int(times.max()), shift_ns)
    unknown = set(stacks.kind) - STACK_KINDS
    if unknown:
        raise InvalidArgument(f"unknown stack sample kind(s) {sorted(unknown)}")


def check_batch(batch: pb.Batch, shift_ns: int = 0) -> BatchStats:
    """Validate a whole batch; returns what the store's per-stream summary needs.

    ``shift_ns``: the stream's record shift as readers will apply it (the batch's own
    clock update included); shifted times must stay in int64."""
    if batch.seq == 0:
        raise InvalidArgument("batch sequence numbers start at 1")
    if batch.dropped > INT64_MAX:
        raise InvalidArgument(f"dropped count {batch.dropped} is out of range")
    _check_uint64("record", batch.records, UINT64_RECORD_FIELDS)
    _check_uint64("host sample", batch.host, UINT64_HOST_FIELDS)
    n = _check_columns(batch.records, RECORD_FIELDS, "record", sparse=True)
    _check_columns(batch.host, HOST_FIELDS, "host sample", sparse=False)
    for s in batch.strings:
        if len(s) > 64 << 10:
            raise InvalidArgument(f"a name of {len(s)} characters (at most 65536)")
    if batch.string_base + len(batch.strings) > MAX_STRINGS:
        raise InvalidArgument(
            f"string table would reach {batch.string_base + len(batch.strings):,} names "
            f"(at most {MAX_STRINGS:,} per stream)"
        )
    if batch.clock_updated:
        _check_clock(batch.clock_offset_ns, batch.clock_rtt_ns)
    _check_devices(batch.devices)
    if batch.HasField("stacks"):
        _check_stacks(batch.stacks, shift_ns)
    first = last = None
    if n:
        kinds = set(np.unique(np.array(batch.records.kind, dtype=np.int64)).tolist())
        unknown = kinds - RECORD_KINDS
        if unknown:
            raise InvalidArgument(f"unknown record kind(s) {sorted(unknown)}")
        raw_starts = batch.records.start_ns  # empty = all zero (sparse columns)
        starts = np.array(raw_starts, dtype=np.int64) if len(raw_starts) else np.zeros(n, np.int64)
        _check_times("record start_ns", starts)
        durations = batch.records.duration_ns
        if len(durations):
            dur = np.array(durations, dtype=np.int64)
            if int(dur.min()) < 0:
                raise InvalidArgument(f"negative record duration {int(dur.min())} ns")
            if int(dur.max()) > MAX_DURATION_NS:
                raise InvalidArgument(f"record duration {int(dur.max())} ns is over a day")
            ends = starts + dur
        else:
            ends = starts
        first, last = int(starts.min()), int(ends.max())
        _check_shifted("record time", first, last, shift_ns)
    if len(batch.host.time_ns):
        host_times = np.array(batch.host.time_ns, dtype=np.int64)
        _check_times("host sample time_ns", host_times)
        _check_shifted("host sample time", int(host_times.min()), int(host_times.max()), shift_ns)
        cpu = batch.host.cpu_percent
        if not all(math.isfinite(c) and c >= 0 for c in cpu):
            raise InvalidArgument("host sample cpu_percent must be finite and >= 0")
    return BatchStats(records=n, first_start_ns=first, last_end_ns=last)
