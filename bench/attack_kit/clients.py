"""A network client of the collector, and launcher jobs as legitimate users run them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import grpc
import numpy as np

from bench.attack_kit.kit import Delivery, Setup, run_figures
from tfprof.core.version import PROTOCOL_VERSION
from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pbg


def hello(
    job: str, run_id: str, stream_id: str, pid: int = 4242, argv: Iterable[str] = (),
    secret: bytes | None = None,
) -> pb.AgentMessage:  # fmt: skip
    """A hello as a network client writes it; with a stream secret of its own (random
    unless given) where the protocol has one, as any client of it must send."""
    now = time.time_ns()
    message = pb.AgentMessage(hello=pb.Hello(
        protocol_version=PROTOCOL_VERSION, job=job, run_id=run_id, host="attacker-host",
        pid=pid, task="0", argv=list(argv), stream_id=stream_id,
        clock=pb.ClockSnapshot(realtime_ns=now, tracer_ns=now, monotonic_ns=time.monotonic_ns()),
    ))  # fmt: skip
    if SECRET_FIELD:
        setattr(message.hello, SECRET_FIELD, os.urandom(32) if secret is None else secret)
    return message


# The name of Hello's stream secret in this checkout's protocol ("" before it had one).
SECRET_FIELD = next(
    (n for n in ("stream_secret", "resume_secret", "secret", "nonce")
     if n in pb.Hello.DESCRIPTOR.fields_by_name),
    "",
)  # fmt: skip


def kernels_batch(seq: int, count: int) -> pb.AgentMessage:
    """``count`` kernels with only kind, start and duration set: the smallest records on
    the wire (about 12 bytes each), each of which the lake stores as every column."""
    batch = pb.Batch(seq=seq)
    now = time.time_ns() - 10**9
    batch.records.kind.extend([pb.KERNEL] * count)
    batch.records.start_ns.extend((now + np.arange(count, dtype=np.int64) * 100).tolist())
    batch.records.duration_ns.extend(np.full(count, 90, np.int64).tolist())
    return pb.AgentMessage(batch=batch)


def stream(address: str, messages: Iterable[pb.AgentMessage], timeout: float = 60,
           metadata: tuple[tuple[str, str], ...] = ()) -> tuple[list[int], str]:  # fmt: skip
    """Send ``messages`` on one Stream call; (the acks' seqs, the status it ended with)."""
    limit = 128 << 20
    options = [("grpc.max_send_message_length", limit), ("grpc.max_receive_message_length", limit)]
    with grpc.insecure_channel(address, options=options) as channel:
        stub = pbg.CollectorStub(channel)
        acks: list[int] = []
        try:
            for ack in stub.Stream(iter(messages), timeout=timeout, metadata=metadata):
                acks.append(ack.seq)
            return acks, "OK"
        except grpc.RpcError as exc:
            return acks, f"{exc.code().name}: {exc.details()}"


def launcher_job(
    setup: Setup, address: str, job: str, speed: str, repeat: int, *extra: str,
    code: str = "print('job done')",
) -> subprocess.Popen[str]:  # fmt: skip
    argv = setup.agent(
        "run", "--collector", address, "--job", job, "--source", f"replay:{setup.trace}",
        "--replay-speed", speed, "--replay-repeat", str(repeat), "--host-metrics-interval", "0",
        "--spool-dir", str(setup.folder("spool-" + job)), "--exit-timeout", "20", *extra,
        "--", sys.executable, "-c", code,
    )  # fmt: skip
    proc = subprocess.Popen(argv, env=setup.env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    setup.procs.append(proc)
    return proc


def legit_launcher(setup: Setup, address: str, data: Path, job: str, repeat: int = 4,
                   wait_s: float = 20) -> Delivery:  # fmt: skip
    """A legitimate launcher job: how long until all its records are stored."""
    sent = setup.records_per_replay * repeat
    start = time.monotonic()
    proc = launcher_job(setup, address, job, "max", repeat)
    took = None
    figures = run_figures(data, job)
    while time.monotonic() - start < wait_s:
        figures = run_figures(data, job)
        if figures.records >= sent:
            took = time.monotonic() - start
            break
        time.sleep(0.2)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    counts = launcher_counts(err)
    said = (f"launcher: {counts[0]:,} delivered, {counts[1]:,} spooled, {counts[2]:,} dropped"
            if counts else "")  # fmt: skip
    return Delivery(sent, figures.records, figures.dropped, took, said)


def wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def launcher_counts(stderr: str) -> tuple[int, int, int] | None:
    """(delivered, spooled, dropped) from the launcher's closing line."""
    m = re.search(r"([\d,]+) records delivered, ([\d,]+) spooled, ([\d,]+) dropped", stderr)
    if m is None:
        return None
    delivered, spooled, dropped = (int(g.replace(",", "")) for g in m.groups())
    return delivered, spooled, dropped


def serve_flags(setup: Setup, command: str = "serve") -> str:
    """``COMMAND --help``: which of the flags a fix adds this collector knows."""
    out = subprocess.run(setup.collector(command, "--help"), env=setup.env(),
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    return out.stdout
