"""``Store``: one data dir, as the server, the commands and retention use it.

It hands out one shared ``StreamWriter`` per open stream, keeps the byte count the
storage metric and retention read, and deletes runs no collector is streaming into.
Names reach a path only after ``tfprof.core.names.check_name``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from tfprof.collector.errors import AlreadyExists, Conflict, NotFound, PathError, PermissionDenied
from tfprof.collector.jobdata import JobData
from tfprof.collector.store import catalog, stream_secret
from tfprof.collector.store.catalog import JobInfo
from tfprof.collector.store.files import DIR_MODE, is_streaming, make_dirs, size_and_mtime
from tfprof.collector.store.loader import load_run
from tfprof.collector.store.writer import StreamWriter
from tfprof.core.names import check_name
from tfprof.proto import collector_pb2 as pb

# Held (flock) by the one ``serve`` that owns a data dir; the kernel drops it if it dies.
SERVE_LOCK = "serve.lock"


class StreamListener(Protocol):
    """Told which streams open and finish (the lake's compactor); must never block."""

    def stream_opened(self, directory: Path) -> None: ...

    def stream_finished(self, directory: Path) -> None: ...


class Store:
    """``create``: make the data dir if missing (serving, importing); readers pass False
    and get ``NotFound`` for a data dir that does not exist, so a typo creates nothing."""

    def __init__(
        self, data_dir: str | os.PathLike[str], fsync: bool = True, *, create: bool = True
    ) -> None:
        self.root = Path(data_dir)
        self.jobs_dir = self.root / "jobs"
        if not create:
            if not self.root.is_dir():
                raise NotFound(f"no such data dir: {self.root}")
        else:
            try:
                if not self.root.exists():
                    self.root.mkdir(mode=DIR_MODE, parents=True)
                    os.chmod(self.root, DIR_MODE)
                make_dirs(self.jobs_dir, self.root)
            except OSError as exc:
                raise PathError.from_os("data dir", self.root, exc) from exc
        self.fsync = fsync
        self._lock = threading.Lock()
        self._open: dict[Path, StreamWriter] = {}
        self._bytes: int | None = None
        self._bytes_lock = threading.Lock()
        self.listener: StreamListener | None = None

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """Hold the data dir's serve lock: a second ``serve`` on it is a ``Conflict``."""
        try:
            lock = open(self.root / SERVE_LOCK, "a+b")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise PathError.from_os("data dir", self.root, exc) from exc
        with lock:
            try:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise Conflict(
                    f"another tfprof-collector serve is using {self.root}: stop it, or give "
                    "this one its own --data-dir"
                ) from None
            yield  # closing the file releases the lock

    # -- writing -------------------------------------------------------------------------

    def open_stream(
        self,
        hello: pb.Hello,
        holder: object = None,
        on_superseded: Callable[[], None] | None = None,
    ) -> StreamWriter:
        """The stream's writer, shared by every call that opens it with its secret.

        A second opening while a call holds the stream is a reconnect of the same agent
        (its old call not yet torn down): it must bring the stream's secret, and then
        every earlier holder is told to end (``on_superseded``, keyed by ``holder``),
        so no old call keeps the log open after the stream's goodbye. Without the
        secret it is ``AlreadyExists``; a stream nobody holds, opened with another
        secret than its first, is ``PermissionDenied``."""
        job = check_name("job name", hello.job)
        run_id = check_name("run id", hello.run_id)
        stream_id = check_name("stream id", hello.stream_id)
        path = self.jobs_dir / job / run_id / stream_id
        digest = stream_secret.digest_of(hello)
        superseded: list[Callable[[], None]] = []
        with self._lock:
            writer = self._open.get(path)
            if writer is not None:
                if not stream_secret.same(writer.secret_digest, digest):
                    raise AlreadyExists(
                        f"stream {stream_id} of job {job} run {run_id} is open on another "
                        "call; a hello for it without its secret is refused"
                    )
                superseded = list(writer.holders.values())
                writer.holders.clear()
                writer.refs += 1
            else:
                stored = stream_secret.stored_digest(path)
                if stored is not None and not stream_secret.same(stored, digest):
                    raise PermissionDenied(
                        f"stream {stream_id} of job {job} run {run_id} exists: only its own "
                        "agent (with the stream's secret) may resume it"
                    )
                writer = StreamWriter(
                    path, hello, fsync=self.fsync, release=self._release,
                    on_finish=self._finished, stop_root=self.jobs_dir,
                )  # fmt: skip
                self._open[path] = writer
            if on_superseded is not None:
                writer.holders[holder] = on_superseded
        for end in superseded:
            end()
        if self.listener is not None:
            self.listener.stream_opened(path)
        return writer

    def _finished(self, directory: Path) -> None:
        if self.listener is not None:
            self.listener.stream_finished(directory)

    def _release(self, writer: StreamWriter, holder: object = None) -> None:
        with self._lock:
            writer.holders.pop(holder, None)
            writer.refs -= 1
            if writer.refs > 0:
                return
            self._open.pop(writer.directory, None)
        writer.close_file()

    def open_streams(self) -> int:
        with self._lock:
            return len(self._open)

    @property
    def lock(self) -> threading.Lock:
        """Held while a stream is opened or a run deleted: what deletes must hold."""
        return self._lock

    def is_open(self, stream_dir: Path) -> bool:
        """Whether a call of this process holds the stream (call under ``lock``)."""
        return stream_dir in self._open

    def forget_size(self) -> None:
        """Recount the bytes stored at next use (files were deleted)."""
        with self._bytes_lock:
            self._bytes = None

    # -- size accounting (for the storage metric and retention) --------------------------

    @property
    def bytes_stored(self) -> int:
        with self._bytes_lock:
            if self._bytes is None:
                self._bytes, _ = size_and_mtime(self.jobs_dir)
            return self._bytes

    def count_bytes(self, delta: int) -> None:
        with self._bytes_lock:
            if self._bytes is not None:
                self._bytes += delta

    # -- reading -------------------------------------------------------------------------

    def job_names(self) -> list[str]:
        return catalog.job_names(self.jobs_dir)

    def load_jobs(self, names: list[str] | None = None) -> list[JobData]:
        """Every run of the named jobs (all jobs when none is named). Time windows are
        applied by the consumers (merge, analyses), on the collector clock."""
        wanted = set(names) if names else None
        if wanted:
            missing = wanted - set(self.job_names())
            if missing:
                raise NotFound(f"no such job in {self.root}: {', '.join(sorted(missing))}")
        return [
            load_run(name, run_id, run_dir)
            for name, run_id, run_dir in catalog.runs(self.jobs_dir)
            if wanted is None or name in wanted
        ]

    def list_jobs(self) -> list[JobInfo]:
        """Job runs with counts and state (see ``catalog.run_info``)."""
        return catalog.list_runs(self.jobs_dir)

    # -- deleting (retention) ------------------------------------------------------------

    def delete_run(self, job: str, run_id: str) -> int:
        """Delete a job run that no collector is streaming into; returns bytes freed."""
        run_dir = self.jobs_dir / check_name("job name", job) / check_name("run id", run_id)
        with self._lock:  # no stream of this run can open while we look and delete
            streams = [p for p in run_dir.iterdir() if p.is_dir()] if run_dir.is_dir() else []
            if any(p in self._open or is_streaming(p) for p in streams):
                raise Conflict(f"job {job} run {run_id} is streaming")
            freed, _ = size_and_mtime(run_dir)
            shutil.rmtree(run_dir, ignore_errors=True)
            with contextlib.suppress(OSError):
                run_dir.parent.rmdir()  # the job's last run: drop the job directory
        with self._bytes_lock:
            self._bytes = None  # recounted on next use: writes add batches only
        return freed
