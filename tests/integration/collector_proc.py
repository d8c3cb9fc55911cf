"""A real ``tfprof-collector serve`` process with any flags, for the collector's own tests."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.integration.conftest import clean_env, collector_cmd


@dataclass
class ServeProcess:
    proc: subprocess.Popen[str]
    address: str
    metrics_url: str | None
    lines: list[str] = field(default_factory=list)  # stdout and stderr, as they come

    def terminate(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def output(self) -> str:
        return "".join(self.lines)

    def healthy(self, timeout: float = 5) -> bool:
        with grpc.insecure_channel(self.address) as ch:
            reply = health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service="tfprof.v1.Collector"), timeout=timeout
            )
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def start_serve(
    data_dir: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 60,
    preexec: Callable[[], None] | None = None,
) -> ServeProcess:
    """Start ``serve`` on 127.0.0.1:0 (unless ``args`` say otherwise) and wait for its
    address (and its metrics address when ``--metrics-listen`` is given); ``preexec``
    runs in the child before it starts (e.g. to enter a memory cgroup)."""
    listen = [] if "--listen" in args else ["--listen", "127.0.0.1:0"]
    proc = subprocess.Popen(
        collector_cmd("serve", "--data-dir", str(data_dir), *listen, *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=clean_env(**(env or {})),
        preexec_fn=preexec,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("metrics on ") or (
                line.startswith("listening on ") and "--metrics-listen" not in args
            ):
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout
    while not ready.wait(0.1) and time.monotonic() < deadline:
        pass
    address = next((ln.split()[-1] for ln in lines if ln.startswith("listening on ")), None)
    metrics = next((ln.split()[-1] for ln in lines if ln.startswith("metrics on ")), None)
    if address is None:
        proc.kill()
        proc.wait()
        raise RuntimeError("collector did not start:\n" + "".join(lines))
    return ServeProcess(proc, address, metrics, lines)
