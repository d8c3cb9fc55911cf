"""Bring recorded trace files into the collector: as stored jobs, or straight into a merge.

A file is read into columnar records by ``tfprof.readers.read_trace`` (every format
tfprof imports), keeps its own clock (the absolute start the file recorded), and is
placed in time by a ``--shift``:

- ``auto``: steps (files of one process) stay on their own clocks unless they overlap,
  then go one after another; jobs and tasks stay on their own clocks if they overlap
  in time (they ran together), else all start with the first file;
- ``none``: every file keeps its own clock;
- ``to-first``: every file starts when the first one starts (side by side);
- ``consecutive``: each file starts where the previous one ended, in the order given;
- a signed duration (``+5s``, ``-250ms``, ``1500us``, ``42ns``): added to every file.

``import_files`` writes each file as one stream of a job run through the store's
``StreamWriter``, behind a synthetic ``Hello`` (host ``imported``, source
``import:<file>``, the file's devices, each GPU named ``import:<job>/<run>/gpu:N``
unless the file names it), so summaries, advice and exports see a job like any live one
and merge it with live jobs. ``jobs_from_files`` builds such streams in
memory for ``tfprof-collector merge``.

A file that says whose records it holds (tfprof's own exports: ``RecordedTrace.tasks``)
keeps that identity through ``merge``: one stream per (job, task) it names, with that
task's records, GPU ordinals and host samples, in a job of that name. Other formats
(TF timeline, Kineto) name no job: each is one stream, its job named after the file.

Files that each name their rank (Kineto's ``distributedInfo``: one file per rank of a
distributed job) are the ranks of one job run: by default (``as_steps=None``) each is
stored as the task of its rank, all on one timeline (a rank's clock is its own, so ranks
that ran together overlap and stay as recorded); files of one rank are its successive
steps. Files that do not all name a rank are steps of one process, as before.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from tfprof.collector.errors import InvalidArgument, NotFound, PathError, StorageUnavailable
from tfprof.collector.jobdata import (
    RECORD_COLUMNS,
    DeviceMeta,
    JobData,
    StreamData,
    empty_host,
)
from tfprof.collector.store import Store
from tfprof.collector.timespec import parse_duration
from tfprof.core.code_stacks import StackBatch
from tfprof.core.names import check_name
from tfprof.core.records import RecordKind
from tfprof.core.version import PROTOCOL_VERSION, __version__
from tfprof.proto import collector_pb2 as pb
from tfprof.readers import RecordedTrace, TraceFormatError, read_trace

IMPORT_HOST = "imported"
SHIFT_MODES = ("auto", "none", "to-first", "consecutive")
BATCH_RECORDS = 1 << 16


@dataclass
class Loaded:
    path: str
    trace: RecordedTrace
    ranked: bool = False  # stored as the task of its rank (``ranked_files``)

    @property
    def identity(self) -> frozenset[tuple[str, str]] | None:
        """The (job, task) pairs the file names, None for a file that names none."""
        if self.trace.tasks:
            return frozenset(self.trace.tasks)
        if self.ranked:
            return frozenset({("", self.task)})
        return None

    @property
    def task(self) -> str:
        """The task a ranked file is stored as: its rank."""
        return str(self.trace.rank)

    @property
    def start(self) -> int:
        return self.trace.origin_ns

    @property
    def end(self) -> int:
        return self.trace.origin_ns + self.trace.span_ns


def ranked_files(files: Sequence[Loaded]) -> bool:
    """Whether ``files`` are ranks of a distributed job: every one names its rank (and
    none names its own tasks); marks them so."""
    ranked = all(f.trace.rank is not None and not f.trace.tasks for f in files)
    for f in files:
        f.ranked = ranked
    return ranked


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Reading a trace makes millions of acyclic objects, some kept until the end (a TF
    timeline's GPU events wait for their twins): the cycle collector would walk them
    again and again and free nothing. Paused, then
    restored, in this process only (the CLI's, not a traced job's)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def load_files(paths: Sequence[str | os.PathLike[str]]) -> list[Loaded]:
    if not paths:
        raise InvalidArgument("no trace files given")
    loaded = []
    for path in paths:
        where = os.fspath(path)
        if not os.path.exists(where):
            raise NotFound(f"no such trace file: {where}")
        try:
            with _no_cycle_collection():
                loaded.append(Loaded(where, read_trace(where)))
        except TraceFormatError as exc:
            raise InvalidArgument(str(exc)) from None
        except OSError as exc:  # exists, but a directory, unreadable, ...
            raise PathError.from_os("trace file", where, exc) from exc
    return loaded


def shifts(files: Sequence[Loaded], mode: str, sequential: bool) -> list[int]:
    """Nanoseconds to add to each file's own clock; ``sequential``: files are steps."""
    if mode not in SHIFT_MODES:
        return [parse_duration(mode)] * len(files)
    if mode == "auto":
        if sequential:
            mode = "consecutive" if _steps_overlap(files) else "none"
        else:
            overlap, latest_end = False, None
            for start, end in sorted((f.start, f.end) for f in files):
                overlap = overlap or (latest_end is not None and start < latest_end)
                latest_end = end if latest_end is None else max(latest_end, end)
            mode = "none" if overlap or len(files) < 2 else "to-first"
    if mode == "none":
        return [0] * len(files)
    if mode == "to-first":
        return [files[0].start - f.start for f in files]
    out, cursor = [], files[0].start
    for f in files:
        out.append(cursor - f.start)
        cursor += f.end - f.start
    return out


def _steps_overlap(files: Sequence[Loaded]) -> bool:
    """Whether two files that would share tracks as steps overlap in time: files naming
    no task, or the same (job, task). Files of different tasks (the ranks of one job,
    each recorded on its own) ran side by side, not one after the other."""
    for i, a in enumerate(files):
        for b in files[i + 1 :]:
            shared = a.identity is None and b.identity is None
            if a.identity is not None and b.identity is not None:
                shared = bool(a.identity & b.identity)
            if shared and a.start < b.end and b.start < a.end:
                return True
    return False


def _devices(trace: RecordedTrace) -> dict[int, DeviceMeta]:
    return {
        int(d["ordinal"]): DeviceMeta(
            ordinal=int(d["ordinal"]),
            uuid="",
            name=str(d.get("name", "")),
            compute_capability=(
                int(d.get("compute_capability_major", 0)),
                int(d.get("compute_capability_minor", 0)),
            ),
            sm_count=int(d.get("sm_count", 0)),
            memory_bytes=int(d.get("memory_bytes", 0)),
        )
        for d in trace.devices
    }


def job_name(path: str) -> str:
    """A job name from a file name: its stem, in the job-name character set."""
    name = Path(path).name
    for suffix in (".gz", ".json", ".pftrace", ".pbtxt", ".pb", ".trace"):
        name = name.removesuffix(suffix)
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip("._-")[:64]
    return name or "trace"


def stream_from(f: Loaded, job: str, run_id: str, task: str, pid: int, shift: int) -> StreamData:
    return StreamData(
        job=job,
        run_id=run_id,
        host=IMPORT_HOST,
        pid=pid,
        task=task,
        source=f"import:{f.path}",
        record_shift_ns=f.trace.origin_ns + shift,
        devices=_devices(f.trace),
        strings=list(f.trace.names),
        records={c: np.frombuffer(f.trace.columns[c], dtype=np.int64) for c in RECORD_COLUMNS},
        finished=True,
        exit_code=0,
    )


def task_streams(f: Loaded, shift: int) -> list[StreamData]:
    """The streams of a file that names its tasks (``Loaded.identity``): one per
    (job, task), holding that task's records with its own GPU ordinals, its devices
    and its host samples, on the file's clock plus ``shift``."""
    trace = f.trace
    assert trace.task_index is not None
    index = np.frombuffer(trace.task_index, dtype=np.int64)
    columns = {c: np.frombuffer(trace.columns[c], dtype=np.int64) for c in RECORD_COLUMNS}
    on_gpu = np.isin(columns["kind"], _DEVICE_KINDS)
    top = max(trace.gpu_of, default=0) + 1
    gpu_of = np.arange(max(top, int(columns["device"].max(initial=0)) + 1), dtype=np.int64)
    for ordinal, gpu in trace.gpu_of.items():
        gpu_of[ordinal] = gpu
    devices = _devices(trace)
    streams = []
    for t, (job, task) in enumerate(trace.tasks):
        rows = np.flatnonzero(index == t)
        records = {c: v[rows] for c, v in columns.items()}
        records["device"] = np.where(on_gpu[rows], gpu_of[records["device"]], records["device"])
        mine = np.unique(columns["device"][rows[on_gpu[rows]]]).tolist()
        stream = stream_from(f, job, "file", task, 1, shift)
        stream.records = records
        stream.devices = {
            gpu_of[o]: replace(devices[o], ordinal=int(gpu_of[o])) for o in mine if o in devices
        }
        stream.host_samples = _host_samples(trace.host_samples.get(t, {}))
        stream.host_shift_ns = stream.record_shift_ns  # samples are on the records' clock
        streams.append(stream)
    return streams


_DEVICE_KINDS = (
    RecordKind.KERNEL, RecordKind.MEMCPY, RecordKind.MEMSET, RecordKind.SYNC, RecordKind.MEMORY
)  # fmt: skip


def _host_samples(read: dict[str, list[float]]) -> dict[str, np.ndarray]:
    """A task's host samples as read (``RecordedTrace.host_samples``) as columns; a
    series the file did not hold reads 0."""
    samples = empty_host()
    count = len(read.get("time_ns", ()))
    for column, empty in samples.items():
        if count:
            samples[column] = np.asarray(read.get(column) or [0] * count, dtype=empty.dtype)
    return samples


def jobs_from_files(
    paths: Sequence[str | os.PathLike[str]], as_steps: bool, shift: str = "auto"
) -> list[JobData]:
    """Files as jobs for ``build_timeline``: steps (one after another, sharing tracks)
    or one job each. Files that name their job and tasks keep them (``task_streams``):
    as steps, the streams of a (job, task) named by several files are that task's steps;
    as jobs, a job a later file names again is told apart by a suffix (``.2``). Other
    files are named after the file: as steps, all of them after the first one."""
    files = load_files(paths)
    if as_steps:
        ranked_files(files)  # the ranks of one job: a task each
    offsets = shifts(files, shift, as_steps)
    jobs: dict[str, JobData] = {}
    fallback = job_name(files[0].path)
    for f, s in zip(files, offsets, strict=True):
        if f.trace.tasks:
            streams = task_streams(f, s)
        else:
            name = fallback if as_steps else job_name(f.path)
            task = f.task if as_steps and f.ranked else "0"
            streams = [stream_from(f, name, "file", task, 1, s)]
        if not as_steps:
            renamed = {job: _unused(job, jobs) for job in dict.fromkeys(s.job for s in streams)}
            for stream in streams:
                stream.job = renamed[stream.job]
        for stream in streams:
            jobs.setdefault(stream.job, JobData(name=stream.job, run_id="file"))
            jobs[stream.job].streams.append(stream)
    return list(jobs.values())


def _unused(name: str, taken: Mapping[str, object]) -> str:
    """``name``, or ``name.N`` with the first N from 2 that no job has yet."""
    n = 1
    found = name
    while found in taken:
        n += 1
        found = f"{name}.{n}"
    return found


def new_run_id() -> str:
    return time.strftime("import-%Y%m%d-%H%M%S", time.gmtime()) + f"-{uuid.uuid4().hex[:8]}"


def import_files(
    store: Store,
    paths: Sequence[str | os.PathLike[str]],
    job: str,
    as_steps: bool | None = None,
    shift: str = "auto",
    run_id: str | None = None,
) -> tuple[str, int]:
    """Store the files as one run of ``job``; returns (run id, records stored).

    ``as_steps``: True, the files are successive steps of one process (task 0); False,
    each is a task of its own (its index); None, ranks when every file names its rank
    (each the task of its rank), else steps."""
    check_name("job name", job)
    files = load_files(paths)
    ranked = as_steps is None and ranked_files(files)
    offsets = shifts(files, shift, as_steps is not False)
    run_id = check_name("run id", run_id or new_run_id())
    total = 0
    for index, (f, offset) in enumerate(zip(files, offsets, strict=True)):
        if ranked:
            task, pid = f.task, int(f.task) + 1
        elif as_steps is False:
            task, pid = str(index), index + 1
        else:
            task, pid = "0", 1
        stream = stream_from(f, job, run_id, task, pid, offset)
        try:
            total += _write_stream(store, stream, f"file-{index}", f.trace.stacks)
        except OSError as exc:
            raise StorageUnavailable(
                f"cannot store {f.path} in {store.root}: {exc.strerror or exc}"
            ) from exc
    return run_id, total


def _stack_batches(stacks: StackBatch, first_seq: int) -> Iterator[pb.Batch]:
    """A trace's Python stacks (names from the first batch's string table) as batches of
    their own, as a live stream sends them: frames and nodes first, samples in chunks."""
    n = len(stacks)
    for seq, a in enumerate(range(0, max(n, 1), BATCH_RECORDS), start=first_seq):
        batch = pb.Batch(seq=seq)
        out = batch.stacks
        if a == 0:
            out.frame_base, out.node_base = stacks.frame_base, stacks.node_base
            for name, column in stacks.frames.items():
                getattr(out, f"frame_{name}").extend(column)
            for name, column in stacks.nodes.items():
                getattr(out, f"node_{name}").extend(column)
        for name, column in stacks.samples.items():
            getattr(out, name).extend(column[a : a + BATCH_RECORDS])
        yield batch


def _write_stream(
    store: Store, stream: StreamData, stream_id: str, stacks: StackBatch | None = None
) -> int:
    hello = pb.Hello(
        protocol_version=PROTOCOL_VERSION,  # imports write what a live stream would
        job=stream.job,
        run_id=stream.run_id,
        host=stream.host,
        pid=stream.pid,
        task=stream.task,
        argv=[stream.source.removeprefix("import:")],
        agent_version=__version__,
        source=stream.source,
        clock_offset_ns=stream.record_shift_ns,
        stream_id=stream_id,
    )
    devices = dict(stream.devices)
    gpu = np.isin(stream.records["kind"], _DEVICE_KINDS)
    for ordinal in np.unique(stream.records["device"][gpu]).tolist():
        devices.setdefault(int(ordinal), DeviceMeta(ordinal=int(ordinal), uuid=""))
    for meta in sorted(devices.values(), key=lambda d: d.ordinal):
        hello.devices.add(
            ordinal=meta.ordinal,
            # A file names no GPU: name it after the import (job and run), so GPU 0 of
            # two imports is never taken for one physical GPU.
            uuid=meta.uuid or f"import:{stream.job}/{stream.run_id}/gpu:{meta.ordinal}",
            name=meta.name,
            compute_capability_major=meta.compute_capability[0],
            compute_capability_minor=meta.compute_capability[1],
            sm_count=meta.sm_count,
            memory_bytes=meta.memory_bytes,
        )
    writer = store.open_stream(hello)
    n = stream.num_records
    try:
        for seq, a in enumerate(range(0, max(n, 1), BATCH_RECORDS), start=1):
            batch = pb.Batch(seq=seq)
            if seq == 1:
                batch.string_base = 0
                batch.strings.extend(stream.strings)
            for col in RECORD_COLUMNS:
                values = stream.records[col][a : a + BATCH_RECORDS]
                if values.any():  # an empty column stands for all zeros
                    getattr(batch.records, col).extend(values.tolist())
            if not len(batch.records.kind) and n:
                raise InvalidArgument(f"{stream.source}: records without a kind")
            writer.append(batch)
        for more in _stack_batches(stacks, seq + 1) if stacks is not None else ():
            writer.append(more)
        writer.finish(pb.Goodbye(records_sent=n, exit_code=0))
    finally:
        writer.close()
    return n
