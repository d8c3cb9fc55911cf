"""agent/relay/host_metrics.py: sampling real processes from outside with psutil."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from tfprof.agent.relay.host_metrics import HostSample, HostSampler

pytestmark = pytest.mark.timeout(30)


class Samples:
    def __init__(self) -> None:
        self.got: list[tuple[int, HostSample]] = []
        self.cond = threading.Condition()

    def __call__(self, pid: int, sample: HostSample) -> None:
        with self.cond:
            self.got.append((pid, sample))
            self.cond.notify_all()

    def wait_for(self, count: int, timeout: float = 10) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: len(self.got) >= count, timeout)


def test_samples_this_process() -> None:
    samples = Samples()
    sampler = HostSampler(interval_ms=20, deliver=samples)
    before = time.time_ns()
    sampler.start()
    try:
        sampler.add(os.getpid())  # samples once right away, then every interval
        assert samples.wait_for(3)
    finally:
        sampler.stop()
    pids = {pid for pid, _ in samples.got}
    assert pids == {os.getpid()}
    for _, s in samples.got:
        assert before <= s.time_ns <= time.time_ns()
        assert s.rss_bytes > 0
        assert s.threads >= 1
        assert s.cpu_percent >= 0.0
        assert s.read_bytes >= 0 and s.write_bytes >= 0
    times = [s.time_ns for _, s in samples.got]
    assert times == sorted(times)


def test_a_process_that_exits_is_removed_quietly() -> None:
    samples = Samples()
    sampler = HostSampler(interval_ms=1000, deliver=samples)  # no thread: sample by hand
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)  # fmt: skip
    try:
        sampler.add(child.pid)
        assert [pid for pid, _ in samples.got] == [child.pid]
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=10)
    sampler.sample(child.pid)  # gone: no sample, no exception, and forgotten
    sampler.sample(child.pid)
    assert len(samples.got) == 1
    assert child.pid not in sampler._procs


def test_adding_a_pid_that_does_not_exist_is_ignored() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=10)
    samples = Samples()
    sampler = HostSampler(interval_ms=1000, deliver=samples)
    sampler.add(child.pid)
    assert samples.got == []
    assert child.pid not in sampler._procs


def test_remove_stops_sampling_a_pid() -> None:
    samples = Samples()
    sampler = HostSampler(interval_ms=1000, deliver=samples)
    sampler.add(os.getpid())
    sampler.remove(os.getpid())
    sampler.remove(os.getpid())  # twice is fine
    sampler.sample(os.getpid())
    assert len(samples.got) == 1


def test_interval_zero_disables_sampling() -> None:
    samples = Samples()
    sampler = HostSampler(interval_ms=0, deliver=samples)
    sampler.start()
    sampler.add(os.getpid())
    sampler.sample(os.getpid())
    sampler.stop()
    assert samples.got == []
    assert not sampler._thread.is_alive()
