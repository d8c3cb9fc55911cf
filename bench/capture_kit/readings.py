"""What capture_alignment.py reads back: when each stream's log first grew, the replayed
trace's exact record times, and the stored streams of the job."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from tfprof.collector.jobdata import StreamData
from tfprof.collector.store.loader import load_stream
from tfprof.readers import load_trace

LOOP_GAP_NS = 1_000_000  # the replay source's gap between loops (sources/replay_plan.py)


class FirstBytes:
    """Polls every stream's log and notes when each first grows past its size now."""

    def __init__(self, logs: list[Path]) -> None:
        self.base = {p: p.stat().st_size for p in logs}
        self.first: dict[Path, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(0.005):
            now = time.time_ns()
            for path, size in self.base.items():
                if path not in self.first and path.stat().st_size > size:
                    self.first[path] = now

    def stop(self) -> dict[Path, int]:
        self._stop.set()
        self._thread.join()
        return self.first


class ReplayTiming:
    """The replayed trace's record times: t0 + loop * period + offset on the host clock."""

    def __init__(self, path: Path) -> None:
        trace = load_trace(path)
        self.offsets = np.sort(np.asarray(trace.column("start_ns"), dtype=np.int64))
        self.period = int(trace.span_ns) + LOOP_GAP_NS
        self.widest_gap = int(
            max(np.diff(self.offsets).max(), self.period - (self.offsets[-1] - self.offsets[0]))
        )

    def phase(self, captured: np.ndarray) -> int | None:
        """t0 mod period of a process, from its captured records (None if ambiguous)."""
        sample = captured[:: max(1, len(captured) // 50)]
        allowed = set((self.offsets % self.period).tolist())
        for offset in np.unique(self.offsets):
            phase = int((captured[0] - offset) % self.period)
            if all(int((t - phase) % self.period) in allowed for t in sample):
                return phase
        return None

    def first_at_or_after(self, phase: int, t: int) -> int:
        k = (t - phase - int(self.offsets[-1])) // self.period
        while True:
            times = phase + k * self.period + self.offsets
            later = times[times >= t]
            if len(later):
                return int(later[0])
            k += 1

    def last_before(self, phase: int, t: int) -> int:
        k = (t - phase - int(self.offsets[0])) // self.period
        while True:
            times = phase + k * self.period + self.offsets
            earlier = times[times < t]
            if len(earlier):
                return int(earlier[-1])
            k -= 1


class StoredStream:
    """One stored stream of the job, with the log file it grows in."""

    def __init__(self, stream: StreamData, log: Path) -> None:
        self.host = stream.host
        self.task = stream.task
        self.records = stream.records
        self.record_shift_ns = int(stream.record_shift_ns)
        self.log = log
        self.stream_dir = log.parent


def stored_streams(data: Path) -> list[StoredStream]:
    out = []
    for directory in sorted(data.glob("jobs/aligned/*/*")):
        stream = load_stream(directory) if (directory / "hello.pb").exists() else None
        if stream is not None:
            out.append(StoredStream(stream, directory / "batches.log"))
    return sorted(out, key=lambda s: (s.host, int(s.task)))
