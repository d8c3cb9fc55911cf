"""Samples each traced process from outside with psutil: the job pays nothing for it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from tfprof.agent.inprocess import clock

log = logging.getLogger("tfprof.agent.relay.host_metrics")


@dataclass(frozen=True)
class HostSample:
    time_ns: int
    cpu_percent: float
    rss_bytes: int
    threads: int
    read_bytes: int
    write_bytes: int


Deliver = Callable[[int, HostSample], None]


class HostSampler:
    """A daemon thread sampling every registered pid each ``interval_ms``."""

    def __init__(self, interval_ms: int, deliver: Deliver) -> None:
        self.interval = interval_ms / 1000.0
        self._deliver = deliver
        self._procs: dict[int, psutil.Process] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tfprof-host", daemon=True)

    def start(self) -> None:
        if self.interval > 0:
            self._thread.start()

    def add(self, pid: int) -> None:
        if self.interval <= 0:
            return
        try:
            proc = psutil.Process(pid)
            proc.cpu_percent(None)  # the first call only sets the baseline
        except psutil.Error:
            return
        with self._lock:
            self._procs[pid] = proc
        self.sample(pid)

    def remove(self, pid: int) -> None:
        with self._lock:
            self._procs.pop(pid, None)

    def sample(self, pid: int) -> None:
        with self._lock:
            proc = self._procs.get(pid)
        if proc is None:
            return
        try:
            with proc.oneshot():
                cpu = proc.cpu_percent(None)
                rss = proc.memory_info().rss
                threads = proc.num_threads()
                try:
                    io = proc.io_counters()
                    read, write = io.read_bytes, io.write_bytes
                except (psutil.AccessDenied, AttributeError):
                    read = write = 0
        except psutil.Error:
            self.remove(pid)
            return
        self._deliver(pid, HostSample(clock.now_ns(), cpu, rss, threads, read, write))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                pids = list(self._procs)
            for pid in pids:
                self.sample(pid)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0)
