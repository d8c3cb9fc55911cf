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

Reading and placing files is ``trace_placement``'s, the streams in memory
``file_streams``'s; this module stores them, and offers both under its name.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator, Sequence

import numpy as np

from tfprof.collector.errors import InvalidArgument, StorageUnavailable
from tfprof.collector.jobdata import RECORD_COLUMNS, DeviceMeta, StreamData
from tfprof.collector.store import Store
from tfprof.collector.store.file_streams import (
    DEVICE_KINDS,
    IMPORT_HOST,
    job_name,
    jobs_from_files,
    stream_from,
    task_streams,
)
from tfprof.collector.store.trace_placement import (
    SHIFT_MODES,
    Loaded,
    load_files,
    ranked_files,
    shifts,
)
from tfprof.core.code_stacks import StackBatch
from tfprof.core.names import check_name
from tfprof.core.version import PROTOCOL_VERSION, __version__
from tfprof.proto import collector_pb2 as pb

BATCH_RECORDS = 1 << 16


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
    gpu = np.isin(stream.records["kind"], DEVICE_KINDS)
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


__all__ = [
    "BATCH_RECORDS",
    "IMPORT_HOST",
    "SHIFT_MODES",
    "Loaded",
    "import_files",
    "job_name",
    "jobs_from_files",
    "load_files",
    "new_run_id",
    "ranked_files",
    "shifts",
    "stream_from",
    "task_streams",
]
