"""Loading a stored stream back as columnar records (``StreamData``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tfprof.collector.model import (
    HOST_COLUMNS,
    RECORD_COLUMNS,
    DeviceMeta,
    JobData,
    StreamData,
    empty_host,
    empty_records,
)
from tfprof.core import batchlog
from tfprof.proto import collector_pb2 as pb


def record_shift(hello: pb.Hello) -> int:
    """Nanoseconds that move the stream's raw record times onto the collector clock."""
    tracer_shift = 0
    if hello.clock.tracer_ns:
        tracer_shift = hello.clock.realtime_ns - hello.clock.tracer_ns
    return hello.clock_offset_ns + tracer_shift


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
        stream = load_stream(stream_dir)
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
        record_shift_ns=record_shift(hello),
        host_shift_ns=hello.clock_offset_ns,
        clock_rtt_ns=hello.clock_rtt_ns,
        devices={d.ordinal: _device(d) for d in hello.devices},
    )
    _read_batches(directory / "batches.log", hello, stream)
    try:
        goodbye = pb.Goodbye.FromString((directory / "goodbye.pb").read_bytes())
    except FileNotFoundError:
        return stream
    stream.finished = True
    stream.dropped.queue = max(stream.dropped.queue, goodbye.dropped_queue)
    stream.dropped.tracer = goodbye.dropped_tracer
    stream.dropped.relay = goodbye.dropped_relay
    stream.exit_code = goodbye.exit_code
    return stream


def _read_batches(log_path: Path, hello: pb.Hello, stream: StreamData) -> None:
    """Fill ``stream``'s records, host samples, names and devices from its log."""
    record_parts: dict[str, list[np.ndarray]] = {c: [] for c in RECORD_COLUMNS}
    host_parts: dict[str, list[np.ndarray]] = {c: [] for c in HOST_COLUMNS}
    strings = [""]
    seen: set[int] = set()
    # A batch with a fresh clock estimate replaces the hello's offset from then on; the
    # stream keeps one shift, so later times are moved by the difference here.
    clock_delta = 0
    for raw in batchlog.read(log_path):
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
    else:
        stream.records = empty_records()
    if host_parts["time_ns"]:
        stream.host_samples = {c: np.concatenate(parts) for c, parts in host_parts.items()}
    else:
        stream.host_samples = empty_host()
    stream.strings = strings
