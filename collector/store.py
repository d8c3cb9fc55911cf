"""On-disk storage of ingested streams, and loading them back as columnar jobs.

Layout under the data dir (names are validated before they reach a path)::

    jobs/<job>/<run_id>/<stream_id>/hello.pb      the stream's Hello
    jobs/<job>/<run_id>/<stream_id>/batches.log   u32 length + Batch, appended per batch
    jobs/<job>/<run_id>/<stream_id>/goodbye.pb    present once the stream ended cleanly

A batch is written and flushed before it is acknowledged; a batch whose sequence number
is already stored is ignored, so replays after reconnects never duplicate records. A
torn final entry (crash mid-write) is ignored on load.
"""

from __future__ import annotations

import os
import re
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tfprof.collector.errors import InvalidArgument, NotFound
from tfprof.collector.model import (
    HOST_COLUMNS,
    RECORD_COLUMNS,
    DeviceMeta,
    JobData,
    StreamData,
    empty_host,
    empty_records,
)
from tfprof.proto import collector_pb2 as pb

_LEN = struct.Struct("<I")
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def check_name(what: str, value: str) -> str:
    if not SAFE_NAME.fullmatch(value):  # fullmatch: `$` alone accepts a trailing "\n"
        raise InvalidArgument(
            f"invalid {what} {value!r}: 1-64 of letters, digits, '.', '_', '-', "
            "starting with a letter or digit"
        )
    return value


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class StreamWriter:
    """Appends one stream's batches; not thread-safe (one gRPC call owns it)."""

    def __init__(self, directory: Path, hello: pb.Hello) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        hello_path = directory / "hello.pb"
        if not hello_path.exists():
            _write_atomic(hello_path, hello.SerializeToString())
        log_path = directory / "batches.log"
        entries = list(_iter_log(log_path))
        self.last_seq = max((pb.Batch.FromString(raw).seq for raw in entries), default=0)
        complete = sum(_LEN.size + len(raw) for raw in entries)
        if log_path.exists() and log_path.stat().st_size > complete:
            os.truncate(log_path, complete)  # a torn tail must not prefix the next entry
        self._log = open(log_path, "ab")  # noqa: SIM115 - held for appends

    def append(self, batch: pb.Batch) -> bool:
        """Store the batch unless its sequence number is already stored."""
        if batch.seq <= self.last_seq:
            return False
        data = batch.SerializeToString()
        self._log.write(_LEN.pack(len(data)) + data)
        self._log.flush()
        self.last_seq = batch.seq
        return True

    def finish(self, goodbye: pb.Goodbye) -> None:
        self._log.flush()
        os.fsync(self._log.fileno())
        _write_atomic(self.directory / "goodbye.pb", goodbye.SerializeToString())

    def close(self) -> None:
        if not self._log.closed:
            self._log.flush()
            self._log.close()


def _iter_log(path: Path) -> Iterator[bytes]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    offset = 0
    while offset + _LEN.size <= len(data):
        (length,) = _LEN.unpack_from(data, offset)
        end = offset + _LEN.size + length
        if end > len(data):
            break  # torn tail
        yield data[offset + _LEN.size : end]
        offset = end


@dataclass
class JobInfo:
    name: str
    run_id: str
    streams: int
    hosts: list[str]
    records: int
    first_ns: int | None
    last_ns: int | None
    finished: bool
    dropped: int


class Store:
    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.root = Path(data_dir)
        self.jobs_dir = self.root / "jobs"
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def open_stream(self, hello: pb.Hello) -> StreamWriter:
        job = check_name("job name", hello.job)
        run_id = check_name("run id", hello.run_id)
        stream_id = check_name("stream id", hello.stream_id)
        with self._lock:
            return StreamWriter(self.jobs_dir / job / run_id / stream_id, hello)

    # -- reading --------------------------------------------------------------------

    def _runs(self) -> Iterator[tuple[str, str, Path]]:
        if not self.jobs_dir.is_dir():
            return
        for job_dir in sorted(self.jobs_dir.iterdir()):
            if not job_dir.is_dir():
                continue
            runs = [r for r in job_dir.iterdir() if r.is_dir()]
            for run_dir in sorted(runs, key=lambda r: r.stat().st_mtime):
                yield job_dir.name, run_dir.name, run_dir

    def job_names(self) -> list[str]:
        return sorted({name for name, _, _ in self._runs()})

    def load_jobs(self, names: list[str] | None = None) -> list[JobData]:
        """Every run of the named jobs (all jobs when none is named)."""
        wanted = set(names) if names else None
        if wanted:
            missing = wanted - set(self.job_names())
            if missing:
                raise NotFound(f"no such job in {self.root}: {', '.join(sorted(missing))}")
        jobs = []
        for name, run_id, run_dir in self._runs():
            if wanted is None or name in wanted:
                job = JobData(name=name, run_id=run_id)
                for stream_dir in sorted(p for p in run_dir.iterdir() if p.is_dir()):
                    stream = load_stream(stream_dir)
                    if stream is not None:
                        job.streams.append(stream)
                jobs.append(job)
        return jobs

    def list_jobs(self) -> list[JobInfo]:
        infos = []
        for job in self.load_jobs():
            firsts, lasts = [], []
            for s in job.streams:
                if s.num_records:
                    starts = s.records["start_ns"] + s.record_shift_ns
                    firsts.append(int(starts.min()))
                    lasts.append(int((starts + s.records["duration_ns"]).max()))
            infos.append(
                JobInfo(
                    name=job.name,
                    run_id=job.run_id,
                    streams=len(job.streams),
                    hosts=sorted({s.host for s in job.streams}),
                    records=job.num_records,
                    first_ns=min(firsts) if firsts else None,
                    last_ns=max(lasts) if lasts else None,
                    finished=all(s.finished for s in job.streams),
                    dropped=job.dropped.total,
                )
            )
        return infos


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


def load_stream(directory: Path) -> StreamData | None:
    try:
        hello = pb.Hello.FromString((directory / "hello.pb").read_bytes())
    except FileNotFoundError:
        return None
    tracer_shift = 0
    if hello.clock.tracer_ns:
        tracer_shift = hello.clock.realtime_ns - hello.clock.tracer_ns
    stream = StreamData(
        job=hello.job,
        run_id=hello.run_id,
        host=hello.host,
        pid=hello.pid,
        task=hello.task or str(hello.pid),
        argv=list(hello.argv),
        source=hello.source,
        record_shift_ns=hello.clock_offset_ns + tracer_shift,
        host_shift_ns=hello.clock_offset_ns,
        clock_rtt_ns=hello.clock_rtt_ns,
        devices={d.ordinal: _device(d) for d in hello.devices},
    )
    record_parts: dict[str, list[np.ndarray]] = {c: [] for c in RECORD_COLUMNS}
    host_parts: dict[str, list[np.ndarray]] = {c: [] for c in HOST_COLUMNS}
    strings = [""]
    seen: set[int] = set()
    for raw in _iter_log(directory / "batches.log"):
        batch = pb.Batch.FromString(raw)
        if batch.seq in seen:
            continue
        seen.add(batch.seq)
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
                record_parts[col].append(part)
        if len(batch.host.time_ns):
            for col in HOST_COLUMNS:
                dtype = np.float64 if col == "cpu_percent" else np.int64
                host_parts[col].append(np.array(getattr(batch.host, col), dtype=dtype))
    if record_parts["kind"]:
        stream.records = {c: np.concatenate(parts) for c, parts in record_parts.items()}
    else:
        stream.records = empty_records()
    if host_parts["time_ns"]:
        stream.host_samples = {c: np.concatenate(parts) for c, parts in host_parts.items()}
    else:
        stream.host_samples = empty_host()
    stream.strings = strings
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
