"""What the data dir holds: its job runs, and each run's counts, time range and state.

Counts come from per-stream summaries (store/stream_counts.py), so listing parses only what
was appended since a stream's summary was last written.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf.message import DecodeError

from tfprof.collector.store.files import is_streaming, size_and_mtime
from tfprof.collector.store.loader import UnreadableStream, check_int64, record_shift, stream_dirs
from tfprof.collector.store.stream_counts import StreamSummary, read_log_state
from tfprof.collector.store.traced_windows import stream_windows, union_ns
from tfprof.proto import collector_pb2 as pb

log = logging.getLogger("tfprof.collector.store")

# Job run states, one definition for ``jobs``, the ``runs`` SQL view and the summaries:
# ``streaming`` while a live collector holds one of the run's streams open (the flock
# it keeps on the stream's log), else ``finished`` once every stream said goodbye,
# else ``incomplete``.
STREAMING, FINISHED, INCOMPLETE = "streaming", "finished", "incomplete"


def run_state(streams: int, finished: int, live: int) -> str:
    """The state of a run of ``streams`` streams, ``finished`` of which said goodbye
    and ``live`` of which a collector holds open."""
    if live:
        return STREAMING
    return FINISHED if finished >= streams > 0 else INCOMPLETE


def run_state_sql(streams: str, finished: str, live: str) -> str:
    """``run_state`` as a SQL expression over three integer columns."""
    return (
        f"CASE WHEN {live} > 0 THEN '{STREAMING}' WHEN {finished} >= {streams} AND "
        f"{streams} > 0 THEN '{FINISHED}' ELSE '{INCOMPLETE}' END"
    )


@dataclass
class JobInfo:
    """One job run, as ``jobs`` lists it."""

    name: str
    run_id: str
    streams: int
    hosts: list[str]
    records: int  # every record of the run (GPU activity and the host side)
    first_ns: int | None  # collector clock (the streams' clock shifts applied)
    last_ns: int | None
    finished: bool  # every stream said goodbye
    dropped: int
    state: str = INCOMPLETE  # STREAMING, FINISHED or INCOMPLETE
    tasks: list[str] = field(default_factory=list)
    bytes: int = 0
    gpu_records: int = 0  # kernels, copies, memsets, syncs
    last_write: float = 0.0  # newest mtime in the run, seconds since 1970
    path: Path | None = None
    # What could not be read: "<stream>: <what> (<records> records lost)".
    skipped: list[str] = field(default_factory=list)
    lost_records: int | None = 0  # records in skipped parts; None: some unknown
    reason: str = ""  # why an incomplete run is incomplete
    # Streams whose process ended without its goodbye, as their relay saw it: "ended by
    # signal 15" and the like, with how many.
    ended: dict[str, int] = field(default_factory=dict)
    # The windows its streams were traced in, collector clock (store/traced_windows.py), and
    # their union's length: what analyses count as captured time.
    windows: list[tuple[int, int]] = field(default_factory=list)
    captured_ns: int = 0


def runs(jobs_dir: Path) -> Iterator[tuple[str, str, Path]]:
    """(job, run id, run directory) of every stored run: jobs by name, runs oldest first."""
    if not jobs_dir.is_dir():
        return
    for job_dir in sorted(jobs_dir.iterdir()):
        if not job_dir.is_dir():
            continue
        job_runs = [r for r in job_dir.iterdir() if r.is_dir()]
        for run_dir in sorted(job_runs, key=lambda r: r.stat().st_mtime):
            yield job_dir.name, run_dir.name, run_dir


def job_names(jobs_dir: Path) -> list[str]:
    return sorted({name for name, _, _ in runs(jobs_dir)})


def list_runs(jobs_dir: Path) -> list[JobInfo]:
    """Every run that has at least one stream, with counts and state."""
    infos = []
    for name, run_id, run_dir in runs(jobs_dir):
        info = run_info(name, run_id, run_dir)
        if info is not None:
            infos.append(info)
    return infos


def run_info(name: str, run_id: str, run_dir: Path) -> JobInfo | None:
    """One run's listing; None when no stream of it has said hello yet."""
    info = JobInfo(name=name, run_id=run_id, streams=0, hosts=[], records=0, first_ns=None,
                   last_ns=None, finished=True, dropped=0, path=run_dir)  # fmt: skip
    hosts, tasks = set(), set()
    live = 0
    span = StreamSummary()
    no_goodbye = 0
    for stream_dir in stream_dirs(run_dir):
        try:
            hello = pb.Hello.FromString((stream_dir / "hello.pb").read_bytes())
        except FileNotFoundError:
            continue
        except DecodeError:
            _skip(info, f"{stream_dir.name}: hello.pb unreadable, stream left out", None)
            info.finished = False
            continue
        info.streams += 1
        hosts.add(hello.host)
        tasks.add(hello.task or str(hello.pid))
        state = read_log_state(stream_dir)
        summary = state.summary
        for i, damage in enumerate(state.damage):
            lost = state.lost_records if i == 0 else 0  # the stream's count, once
            _skip(info, f"{stream_dir.name}: batches.log {damage}", lost)
        try:
            shift = check_int64("record clock shift", record_shift(hello))
        except UnreadableStream as exc:
            _skip(info, f"{stream_dir.name}: {exc}, stream left out", summary.records)
            info.finished = False
            continue
        info.records += summary.records
        info.gpu_records += summary.gpu_records
        edges = summary.collector_edges(hello.clock_offset_ns)
        rows = stream_windows(stream_dir, hello, edges, shift, summary)
        info.windows += [(a, b) for _, _, a, b in rows]
        if summary.first_start_ns is not None and summary.last_end_ns is not None:
            span.widen(summary.first_start_ns + shift, summary.last_end_ns + shift)
        dropped_queue = summary.dropped_queue
        try:
            bye = pb.Goodbye.FromString((stream_dir / "goodbye.pb").read_bytes())
            dropped_queue = max(dropped_queue, bye.dropped_queue)
            info.dropped += bye.dropped_tracer + bye.dropped_relay
            if bye.end != pb.PROCESS_END_UNSPECIFIED:
                how = _ENDS.get(bye.end, "ended").format(bye.signal, bye.exit_code)
                info.ended[how] = info.ended.get(how, 0) + 1
        except FileNotFoundError:
            info.finished = False
            no_goodbye += 1
        except DecodeError:
            info.finished = False
            _skip(info, f"{stream_dir.name}: goodbye.pb unreadable", 0)
        info.dropped += dropped_queue
        live += is_streaming(stream_dir)
    if info.streams == 0 and not info.skipped:
        return None
    info.hosts, info.tasks = sorted(hosts), sorted(tasks)
    info.captured_ns = union_ns(info.windows)
    info.first_ns, info.last_ns = span.first_start_ns, span.last_end_ns
    info.state = run_state(1, int(info.finished), live)
    if info.state == INCOMPLETE:
        reasons = [f"agent lost: no goodbye from {no_goodbye} stream(s)"] if no_goodbye else []
        info.reason = "; ".join(reasons + (["unreadable files"] if info.skipped else []))
    info.bytes, info.last_write = size_and_mtime(run_dir)
    return info


# How a relay saw a process end without its goodbye (Goodbye.end), for `jobs`' notes.
_ENDS = {
    pb.SIGNALED: "ended by signal {0}",
    pb.EXITED: "exited with status {1}",
    pb.GONE: "ended (os._exit or a signal)",
}


def ended_note(info: JobInfo) -> str:
    """One line for the streams a relay finished, or ""."""
    if not info.ended:
        return ""
    parts = ", ".join(f"{n} {how}" for how, n in sorted(info.ended.items()))
    return f"without a goodbye, seen ending by their relay: {parts}; their counts are the relay's"


def _skip(info: JobInfo, what: str, lost: int | None) -> None:
    """Note a part of the run that could not be read, with a warning naming it."""
    log.warning("job %s run %s: %s", info.name, info.run_id, what)
    info.skipped.append(what)
    if lost is None or info.lost_records is None:
        info.lost_records = None
    else:
        info.lost_records += lost
