"""On-disk storage of ingested streams, and loading them back as columnar jobs.

Layout under the data dir (names are validated before they reach a path)::

    jobs/<job>/<run_id>/<stream_id>/hello.pb      the stream's Hello
    jobs/<job>/<run_id>/<stream_id>/batches.log   u32 length + Batch, appended per batch
    jobs/<job>/<run_id>/<stream_id>/goodbye.pb    present once the stream ended cleanly
    jobs/<job>/<run_id>/<stream_id>/summary.json  counts and time range of a log prefix

Durability: a batch is written, flushed and (with ``fsync``, the default) fdatasync'ed
before ``append`` returns, and the ack goes out only after that. fdatasync costs
0.1-0.3 ms per 4-64 KiB batch on this project's ext4 VMs (about 2 ms per MiB), small
next to parsing the batch, and is what makes "acknowledged" survive a host crash, not
just a collector crash; ``--fsync false`` turns it off for scratch collectors.

A batch whose sequence number is already stored is ignored, so replays after reconnects
never duplicate records. One ``StreamWriter`` per stream directory is shared by every
call that opens it (a reconnect racing the old call's teardown), its appends serialised
by a lock; an ``flock`` on batches.log keeps a second collector process out, and tells
``jobs`` and retention that a live collector has the stream open. A torn final entry
(crash mid-write) is ignored on load and cut off when the stream is reopened.

summary.json is a cache, never fsync'ed: it covers the first ``log_bytes`` of the log,
and readers parse only what was appended after it, so listing jobs stays cheap.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from tfprof.collector.errors import Conflict, InvalidArgument, NotFound
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

log = logging.getLogger("tfprof.collector.store")

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
SUMMARY_EVERY_S = 5.0
LOCK_WAIT_S = 3.0

# Job run states shown by ``jobs`` (see ``RunInfo.state``).
STREAMING, FINISHED, INCOMPLETE = "streaming", "finished", "incomplete"


def check_name(what: str, value: str) -> str:
    if not SAFE_NAME.fullmatch(value):  # fullmatch: `$` alone accepts a trailing "\n"
        raise InvalidArgument(
            f"invalid {what} {value!r}: 1-64 of letters, digits, '.', '_', '-', "
            "starting with a letter or digit"
        )
    return value


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: bytes, durable: bool = True) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        if durable:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if durable:
        _fsync_dir(path.parent)


@dataclass
class StreamSummary:
    """What listing needs of a stream's log, for its first ``log_bytes`` bytes."""

    log_bytes: int = 0
    last_seq: int = 0
    batches: int = 0
    records: int = 0
    first_start_ns: int | None = None  # raw record times, before the clock shift
    last_end_ns: int | None = None
    dropped_queue: int = 0

    def add(self, batch: pb.Batch, entry_bytes: int) -> None:
        self.log_bytes += entry_bytes
        self.last_seq = max(self.last_seq, batch.seq)
        self.batches += 1
        self.dropped_queue = max(self.dropped_queue, batch.dropped)
        n = len(batch.records.kind)
        if not n:
            return
        self.records += n
        starts = batch.records.start_ns
        first = min(starts) if len(starts) else 0
        dur = batch.records.duration_ns
        if len(starts) and len(dur):
            last = int((np.array(starts, np.int64) + np.array(dur, np.int64)).max())
        else:
            last = max(starts) if len(starts) else (max(dur) if len(dur) else 0)
        self.widen(first, last)

    def widen(self, first: int | None, last: int | None) -> None:
        if first is not None:
            self.first_start_ns = (
                first if self.first_start_ns is None else min(self.first_start_ns, first)
            )
        if last is not None:
            self.last_end_ns = last if self.last_end_ns is None else max(self.last_end_ns, last)


def read_summary(directory: Path) -> StreamSummary:
    """The stream's summary, brought up to date with the log's tail (torn tail left out)."""
    log_path = directory / "batches.log"
    summary = StreamSummary()
    try:
        cached = json.loads((directory / "summary.json").read_text())
        candidate = StreamSummary(**cached)
        if 0 <= candidate.log_bytes <= log_path.stat().st_size:
            summary = candidate
    except (OSError, ValueError, TypeError):
        pass  # missing, torn or stale: rescan the whole log
    for raw in batchlog.read(log_path, summary.log_bytes):
        batch = pb.Batch.FromString(raw)
        if batch.seq <= summary.last_seq:
            summary.log_bytes += batchlog.LENGTH.size + len(raw)  # an old duplicate entry
            continue
        summary.add(batch, batchlog.LENGTH.size + len(raw))
    return summary


def _flock_within(fd: int, timeout: float) -> bool:
    """Take the exclusive lock, waiting up to ``timeout`` for a previous holder that is
    going away (a collector still tearing down a call when its successor starts)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)


def is_streaming(directory: Path) -> bool:
    """Whether a live collector holds the stream open (its flock on batches.log)."""
    try:
        fd = os.open(directory / "batches.log", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops our own shared lock, if we got it
    return False


class StreamWriter:
    """Appends one stream's batches. Thread-safe: concurrent calls that reopen the same
    stream share one writer (see ``Store.open_stream``)."""

    def __init__(
        self,
        directory: Path,
        hello: pb.Hello,
        fsync: bool = True,
        release: Callable[[StreamWriter], None] | None = None,
    ) -> None:
        self.directory = directory
        self.fsync = fsync
        self._release = release
        self._lock = threading.Lock()
        self.refs = 1
        created = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        log_path = directory / "batches.log"
        self._log = open(log_path, "ab")  # noqa: SIM115 - held for appends
        if not _flock_within(self._log.fileno(), LOCK_WAIT_S):
            self._log.close()
            raise Conflict(
                f"stream {directory.name} is held open by another collector on this data dir"
            )
        hello_path = directory / "hello.pb"
        if not hello_path.exists():
            _write_atomic(hello_path, hello.SerializeToString(), durable=fsync)
        self.summary = read_summary(directory)
        if log_path.stat().st_size > self.summary.log_bytes:
            # A torn tail must not prefix the next entry.
            os.truncate(log_path, self.summary.log_bytes)
        if created and fsync:
            # Every directory entry on the way must be durable, down from jobs/, or a
            # host crash could take a first run's acknowledged batches with it.
            for d in (directory, directory.parent, directory.parent.parent, directory.parents[2]):
                _fsync_dir(d)
        self._summary_written = time.monotonic()

    @property
    def last_seq(self) -> int:
        return self.summary.last_seq

    def append(self, batch: pb.Batch, span: tuple[int | None, int | None] | None = None) -> int:
        """Store the batch unless its sequence number is already stored.

        Returns the bytes written, 0 for a duplicate. ``span`` is the batch's raw
        (first start, last end) when the caller has computed it already."""
        data = batch.SerializeToString()
        with self._lock:
            if batch.seq <= self.summary.last_seq:
                return 0
            written = batchlog.append(self._log, data)
            self._log.flush()
            if self.fsync:
                os.fdatasync(self._log.fileno())
            if span is None:
                self.summary.add(batch, written)
            else:
                self.summary.log_bytes += written
                self.summary.last_seq = batch.seq
                self.summary.batches += 1
                self.summary.records += len(batch.records.kind)
                self.summary.dropped_queue = max(self.summary.dropped_queue, batch.dropped)
                self.summary.widen(*span)
            if time.monotonic() - self._summary_written > SUMMARY_EVERY_S:
                self._write_summary()
        return written

    def _write_summary(self) -> None:
        _write_atomic(
            self.directory / "summary.json",
            json.dumps(asdict(self.summary)).encode(),
            durable=False,
        )
        self._summary_written = time.monotonic()

    def finish(self, goodbye: pb.Goodbye) -> None:
        with self._lock:
            self._log.flush()
            os.fsync(self._log.fileno())
            self._write_summary()
            _write_atomic(self.directory / "goodbye.pb", goodbye.SerializeToString())

    def close(self) -> None:
        """Release this caller's share; the last one closes the file and its lock."""
        if self._release is not None:
            self._release(self)
        else:
            self.close_file()

    def close_file(self) -> None:
        with self._lock:
            if self._log.closed:
                return
            try:  # a full disk must not leave the file (and its flock) open
                with contextlib.suppress(OSError):
                    self._log.flush()
                    self._write_summary()
            finally:
                self._log.close()


def _du(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


@dataclass
class JobInfo:
    """One job run, as ``jobs`` lists it."""

    name: str
    run_id: str
    streams: int
    hosts: list[str]
    records: int
    first_ns: int | None  # collector clock (the streams' clock shifts applied)
    last_ns: int | None
    finished: bool  # every stream said goodbye
    dropped: int
    state: str = INCOMPLETE  # STREAMING, FINISHED or INCOMPLETE
    tasks: list[str] = field(default_factory=list)
    bytes: int = 0
    last_write: float = 0.0  # newest mtime in the run, seconds since 1970
    path: Path | None = None


class Store:
    def __init__(self, data_dir: str | os.PathLike[str], fsync: bool = True) -> None:
        self.root = Path(data_dir)
        self.jobs_dir = self.root / "jobs"
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self._lock = threading.Lock()
        self._open: dict[Path, StreamWriter] = {}
        self._bytes: int | None = None
        self._bytes_lock = threading.Lock()

    def open_stream(self, hello: pb.Hello) -> StreamWriter:
        job = check_name("job name", hello.job)
        run_id = check_name("run id", hello.run_id)
        stream_id = check_name("stream id", hello.stream_id)
        path = self.jobs_dir / job / run_id / stream_id
        with self._lock:
            writer = self._open.get(path)
            if writer is not None:
                writer.refs += 1
                return writer
            writer = StreamWriter(path, hello, fsync=self.fsync, release=self._release)
            self._open[path] = writer
            return writer

    def _release(self, writer: StreamWriter) -> None:
        with self._lock:
            writer.refs -= 1
            if writer.refs > 0:
                return
            self._open.pop(writer.directory, None)
        writer.close_file()

    def open_streams(self) -> int:
        with self._lock:
            return len(self._open)

    # -- size accounting (for the storage metric and retention) --------------------------

    @property
    def bytes_stored(self) -> int:
        with self._bytes_lock:
            if self._bytes is None:
                self._bytes = _du(self.jobs_dir)
            return self._bytes

    def count_bytes(self, delta: int) -> None:
        with self._bytes_lock:
            if self._bytes is not None:
                self._bytes += delta

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
        """Every run of the named jobs (all jobs when none is named). Time windows are
        applied by the consumers (merge, analyses), on the collector clock."""
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
        """Job runs with counts and state, from per-stream summaries: only what was
        appended since a stream's summary was last written is parsed."""
        infos = []
        for name, run_id, run_dir in self._runs():
            info = JobInfo(name=name, run_id=run_id, streams=0, hosts=[], records=0,
                           first_ns=None, last_ns=None, finished=True, dropped=0,
                           path=run_dir)  # fmt: skip
            hosts, tasks = set(), set()
            streaming = False
            span = StreamSummary()
            for stream_dir in sorted(p for p in run_dir.iterdir() if p.is_dir()):
                try:
                    hello = pb.Hello.FromString((stream_dir / "hello.pb").read_bytes())
                except FileNotFoundError:
                    continue
                info.streams += 1
                hosts.add(hello.host)
                tasks.add(hello.task or str(hello.pid))
                summary = read_summary(stream_dir)
                info.records += summary.records
                shift = _record_shift(hello)
                if summary.first_start_ns is not None and summary.last_end_ns is not None:
                    span.widen(summary.first_start_ns + shift, summary.last_end_ns + shift)
                dropped_queue = summary.dropped_queue
                try:
                    bye = pb.Goodbye.FromString((stream_dir / "goodbye.pb").read_bytes())
                    dropped_queue = max(dropped_queue, bye.dropped_queue)
                    info.dropped += bye.dropped_tracer + bye.dropped_relay
                except FileNotFoundError:
                    info.finished = False
                info.dropped += dropped_queue
                streaming = streaming or is_streaming(stream_dir)
            if info.streams == 0:
                continue
            info.hosts, info.tasks = sorted(hosts), sorted(tasks)
            info.first_ns, info.last_ns = span.first_start_ns, span.last_end_ns
            info.state = STREAMING if streaming else FINISHED if info.finished else INCOMPLETE
            info.bytes, info.last_write = _size_and_mtime(run_dir)
            infos.append(info)
        return infos

    # -- deleting (retention) ------------------------------------------------------------

    def delete_run(self, job: str, run_id: str) -> int:
        """Delete a job run that no collector is streaming into; returns bytes freed."""
        run_dir = self.jobs_dir / check_name("job name", job) / check_name("run id", run_id)
        with self._lock:  # no stream of this run can open while we look and delete
            streams = [p for p in run_dir.iterdir() if p.is_dir()] if run_dir.is_dir() else []
            if any(p in self._open or is_streaming(p) for p in streams):
                raise Conflict(f"job {job} run {run_id} is streaming")
            freed, _ = _size_and_mtime(run_dir)
            shutil.rmtree(run_dir, ignore_errors=True)
            with contextlib.suppress(OSError):
                run_dir.parent.rmdir()  # the job's last run: drop the job directory
        with self._bytes_lock:
            self._bytes = None  # recounted on next use: writes add batches only
        return freed


def _size_and_mtime(run_dir: Path) -> tuple[int, float]:
    size, newest = 0, 0.0
    for dirpath, _dirs, files in os.walk(run_dir):
        for name in files:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            size += st.st_size
            newest = max(newest, st.st_mtime)
    return size, newest


def _record_shift(hello: pb.Hello) -> int:
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


def load_stream(directory: Path) -> StreamData | None:
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
        record_shift_ns=_record_shift(hello),
        host_shift_ns=hello.clock_offset_ns,
        clock_rtt_ns=hello.clock_rtt_ns,
        devices={d.ordinal: _device(d) for d in hello.devices},
    )
    record_parts: dict[str, list[np.ndarray]] = {c: [] for c in RECORD_COLUMNS}
    host_parts: dict[str, list[np.ndarray]] = {c: [] for c in HOST_COLUMNS}
    strings = [""]
    seen: set[int] = set()
    # A batch with a fresh clock estimate replaces the hello's offset from then on; the
    # stream keeps one shift, so later times are moved by the difference here.
    clock_delta = 0
    for raw in batchlog.read(directory / "batches.log"):
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
