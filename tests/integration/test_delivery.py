"""Delivery with real processes: every record stored exactly once, or counted as dropped,
through collector crashes, outages and a network that stalls and drops connections."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from tests.integration.delivery_replay import (
    REPEAT,
    TRACE,
    expected_records,
    log_bytes,
    stored_records,
)
from tfprof.collector.store import Store

from .conftest import Collector, agent_cmd, clean_env, collector_cmd, start_collector


def replay_job(
    traces: Path, collector: str, spool: Path, job: str, speed: str, **env: str
) -> subprocess.Popen[str]:
    cmd = agent_cmd(
        "run", "--collector", collector, "--job", job,
        "--source", f"replay:{traces / TRACE}", "--replay-speed", speed,
        "--replay-repeat", str(REPEAT), "--host-metrics-interval", "0",
        "--spool-dir", str(spool), "--exit-timeout", "120",
        "--", sys.executable, "-c", "print('job done')",
    )  # fmt: skip
    return subprocess.Popen(
        cmd,
        env=clean_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def assert_exactly_once(data_dir: Path, job: str, expected: int) -> None:
    rows = stored_records(data_dir, job)
    assert len(rows) == expected, f"{len(rows)} records stored, {expected} replayed"
    assert len(np.unique(rows, axis=0)) == expected, "duplicated records"


def test_collector_killed_mid_stream_and_restarted(traces: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    collector = start_collector(data)
    port = collector.address.rsplit(":", 1)[1]
    job = replay_job(traces, collector.address, tmp_path / "spool", "killed", "30")
    try:
        deadline = time.monotonic() + 60
        while log_bytes(data) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert log_bytes(data) > 0, "nothing stored before the kill"
        collector.proc.send_signal(signal.SIGKILL)
        collector.proc.wait(10)
        assert job.poll() is None, "the replay ended before the collector was killed"
        time.sleep(1.0)
        collector = start_collector(data, listen=f"127.0.0.1:{port}")
        out, err = job.communicate(timeout=180)
        assert job.returncode == 0, err
        assert out == "job done\n"
    finally:
        if job.poll() is None:
            job.kill()
        assert collector.stop() == 0
    assert_exactly_once(data, "killed", expected_records(traces))


def test_collector_down_for_the_whole_job_then_flush(traces: Path, tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on, that we can start on later
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    spool = tmp_path / "spool"
    started = time.monotonic()
    job = replay_job(traces, address, spool, "outage", "max")
    out, err = job.communicate(timeout=180)
    elapsed = time.monotonic() - started
    assert job.returncode == 0, err
    assert out == "job done\n"
    assert "flush-spool" in err
    assert list(spool.glob("*/outage/*/*/batches.log")), "nothing was spooled"
    assert elapsed < 60  # bounded: the launcher spools at once when the collector is down

    data = tmp_path / "data"
    collector = start_collector(data, listen=address)
    try:
        flush = subprocess.run(
            agent_cmd("flush-spool", "--spool-dir", str(spool)),
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert flush.returncode == 0, flush.stderr
        assert "delivered" in flush.stderr
        assert not list(spool.glob("*/*/*/*/batches.log"))
    finally:
        assert collector.stop() == 0
    assert_exactly_once(data, "outage", expected_records(traces))
    (run,) = Store(data).load_jobs(["outage"])
    assert all(s.finished for s in run.streams)


class FlakyProxy:
    """A TCP proxy that now and then stalls for a while, or drops every connection."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.stalled = threading.Event()
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        self.drops = 0
        self.stalls = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                while self.stalled.is_set():
                    time.sleep(0.01)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass

    def drop_all(self) -> None:
        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass
        self.drops += 1

    def stall(self, seconds: float) -> None:
        self.stalled.set()
        time.sleep(seconds)
        self.stalled.clear()
        self.stalls += 1

    def close(self) -> None:
        self.listener.close()
        self.drop_all()


def test_a_network_that_stalls_and_drops(
    traces: Path, tmp_path: Path, collector: Collector
) -> None:
    host, port = collector.address.rsplit(":", 1)
    proxy = FlakyProxy((host, int(port)))
    job = replay_job(traces, proxy.address, tmp_path / "spool", "flaky", "30",
                     TFPROF_DELIVERY_TIMEOUT="120")  # fmt: skip
    try:
        while job.poll() is None:
            time.sleep(0.7)
            proxy.stall(1.0)
            time.sleep(0.7)
            proxy.drop_all()
        _, err = job.communicate(timeout=180)
        assert job.returncode == 0, err
    finally:
        if job.poll() is None:
            job.kill()
        proxy.close()
    assert proxy.drops >= 2 and proxy.stalls >= 2
    assert_exactly_once(collector.data_dir, "flaky", expected_records(traces))


def test_spool_overflow_is_counted_in_export_and_jobs(traces: Path, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    spool = tmp_path / "spool"
    job = replay_job(traces, address, spool, "overflow", "max", TFPROF_SPOOL_BYTES="200000")
    _, err = job.communicate(timeout=180)
    assert job.returncode == 0, err
    data = tmp_path / "data"
    collector = start_collector(data, listen=address)
    try:
        subprocess.run(agent_cmd("flush-spool", "--spool-dir", str(spool)), env=clean_env(),
                       capture_output=True, timeout=180, check=True)  # fmt: skip
        out = tmp_path / "overflow.json"
        subprocess.run(collector_cmd("export", "--data-dir", str(data), "-o", str(out)),
                       env=clean_env(), capture_output=True, timeout=120, check=True)  # fmt: skip
        listing = subprocess.run(
            collector_cmd("jobs", "--data-dir", str(data)),
            env=clean_env(), capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
    finally:
        collector.stop()
    meta = json.loads(out.read_text())["otherData"]
    (job_meta,) = meta["jobs"]
    stored = len(stored_records(data, "overflow"))
    dropped = job_meta["dropped"]["total"]
    assert dropped > 0
    assert stored + dropped == expected_records(traces)  # nothing lost silently
    assert f"{dropped:,}" in listing.stdout
