"""Loading a stored stream back as columnar records (``StreamData``).

One unreadable stream (a torn hello, a clock whose shift leaves int64) is left out of
its run with one warning naming it, never failing every job of the data dir; damaged
log entries are skipped and listed in ``StreamData.skipped``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from google.protobuf.message import DecodeError

from tfprof.collector.jobdata import (
    HOST_COLUMNS,
    RECORD_COLUMNS,
    DeviceMeta,
    JobData,
    StreamData,
    empty_host,
    empty_records,
)
from tfprof.collector.store.stream_counts import read_log_state
from tfprof.core import batchlog
from tfprof.proto import collector_pb2 as pb

log = logging.getLogger("tfprof.collector.store")


def record_shift(hello: pb.Hello) -> int:
    """Nanoseconds that move the stream's raw record times onto the collector clock."""
    tracer_shift = hello.clock.realtime_ns - hello.clock.tracer_ns if hello.clock.tracer_ns else 0
    return hello.clock_offset_ns + tracer_shift


INT64_MAX = 2**63 - 1


class UnreadableStream(ValueError):
    """A stored stream whose values cannot be used (they would overflow int64)."""


def check_int64(what: str, value: int) -> int:
    if not -INT64_MAX <= value <= INT64_MAX:
        raise UnreadableStream(f"{what} {value} does not fit in 64 bits")
    return value


def _device(d: pb.Device) -> DeviceMeta:
    return DeviceMeta(
        ordinal=d.ordinal,
        uuid=d.uuid,
        name=d.name,
        pci_bus_id=d.pci_bus_id,
        compute_capability=(d.compute_capability_major, d.compute_capability_minor),
        sm_count=d.sm_count,
        memory_bytes=d.memory_bytes,
    )


def stream_dirs(run_dir: Path) -> list[Path]:
    """A run's stream directories, in name order."""
    return sorted(p for p in run_dir.iterdir() if p.is_dir())


def load_run(name: str, run_id: str, run_dir: Path) -> JobData:
    """Every stream of one job run."""
    job = JobData(name=name, run_id=run_id)
    for stream_dir in stream_dirs(run_dir):
        try:
            stream = load_stream(stream_dir)
        except (DecodeError, UnreadableStream, OverflowError) as exc:
            why = f"{stream_dir.name}: {exc or type(exc).__name__}"
            log.warning("job %s run %s: stream %s left out", name, run_id, why)
            job.skipped.append(why)
            continue
        if stream is not None:
            job.streams.append(stream)
    return job


def load_stream(directory: Path) -> StreamData | None:
    """The stream stored in ``directory``; None if it has no hello (not a stream)."""
    try:
        hello = pb.Hello.FromString((directory / "hello.pb").read_bytes())
    except FileNotFoundError:
        return None
    stream = StreamData(
        job=hello.job,
        run_id=hello.run_id,
        host=hello.host,
        pid=hello.pid,
        task=hello.task or str(hello.pid),
        argv=list(hello.argv),
        source=hello.source,
        record_shift_ns=check_int64("record clock shift", record_shift(hello)),
        host_shift_ns=hello.clock_offset_ns,
        clock_rtt_ns=hello.clock_rtt_ns,
        devices={d.ordinal: _device(d) for d in hello.devices},
    )
    _read_batches(directory, hello, stream)
    try:
        goodbye = pb.Goodbye.FromString((directory / "goodbye.pb").read_bytes())
    except FileNotFoundError:
        return stream
    except DecodeError:
        log.warning("stream %s: goodbye.pb is unreadable; the stream counts as unfinished",
                    directory)  # fmt: skip
        stream.skipped.append("goodbye.pb unreadable")
        return stream
    stream.finished = True
    stream.dropped.queue = max(stream.dropped.queue, goodbye.dropped_queue)
    stream.dropped.tracer = check_int64("dropped tracer count", goodbye.dropped_tracer)
    stream.dropped.relay = check_int64("dropped relay count", goodbye.dropped_relay)
    check_int64("dropped queue count", stream.dropped.queue)
    stream.exit_code = goodbye.exit_code
    return stream


def _read_batches(directory: Path, hello: pb.Hello, stream: StreamData) -> None:
    """Fill ``stream``'s records, host samples, names and devices from its log."""
    record_parts: dict[str, list[np.ndarray]] = {c: [] for c in RECORD_COLUMNS}
    host_parts: dict[str, list[np.ndarray]] = {c: [] for c in HOST_COLUMNS}
    strings = [""]
    seen: set[int] = set()
    # A batch with a fresh clock estimate replaces the hello's offset from then on; the
    # stream keeps one shift, so later times are moved by the difference here.
    clock_delta = 0
    scan = batchlog.Scan(batchlog.V2, 0)
    for raw in batchlog.read(directory / "batches.log", 0, scan):
        batch = pb.Batch.FromString(raw)
        if batch.seq in seen:
            continue
        seen.add(batch.seq)
        if batch.clock_updated:
            clock_delta = batch.clock_offset_ns - hello.clock_offset_ns
        if batch.strings:
            # A gap (a batch lost before the collector) leaves placeholder names.
            while len(strings) < batch.string_base:
                strings.append(f"<unknown name {len(strings)}>")
            strings[batch.string_base : batch.string_base + len(batch.strings)] = list(
                batch.strings
            )
        for d in batch.devices:
            stream.devices[d.ordinal] = _device(d)
        stream.dropped.queue = max(stream.dropped.queue, batch.dropped)
        n = len(batch.records.kind)
        if n:
            for col in RECORD_COLUMNS:
                values = getattr(batch.records, col)
                # An empty column stands for all zeros (see Records in collector.proto).
                part = np.array(values, dtype=np.int64) if len(values) else np.zeros(n, np.int64)
                if col == "start_ns" and clock_delta:
                    part += clock_delta
                record_parts[col].append(part)
        if len(batch.host.time_ns):
            for col in HOST_COLUMNS:
                dtype = np.float64 if col == "cpu_percent" else np.int64
                part = np.array(getattr(batch.host, col), dtype=dtype)
                if col == "time_ns" and clock_delta:
                    part += clock_delta
                host_parts[col].append(part)
    if record_parts["kind"]:
        stream.records = {c: np.concatenate(parts) for c, parts in record_parts.items()}
        starts = stream.records["start_ns"]
        # Shifted times must stay in int64: numpy would wrap them silently.
        check_int64("shifted record time", int(starts.max()) + stream.record_shift_ns)
        check_int64("shifted record time", int(starts.min()) + stream.record_shift_ns)
    else:
        stream.records = empty_records()
    if host_parts["time_ns"]:
        stream.host_samples = {c: np.concatenate(parts) for c, parts in host_parts.items()}
    else:
        stream.host_samples = empty_host()
    stream.strings = strings
    if scan.damage:
        _note_damage(directory, stream)


def _note_damage(directory: Path, stream: StreamData) -> None:
    state = read_log_state(directory)  # what the damaged entries held, from the cache
    if not state.damage:
        return  # a torn tail being written by a live collector
    stream.lost_records = state.lost_records
    lost = "an unknown number of" if state.lost_records is None else f"{state.lost_records:,}"
    for damage in state.damage:
        stream.skipped.append(f"batches.log: {damage}")
    log.warning("stream %s: skipped %s of batches.log (%s records lost)", directory,
                "; ".join(str(d) for d in state.damage), lost)  # fmt: skip
