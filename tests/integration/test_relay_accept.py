"""The relay's accept loop outlives a full descriptor table: a real relay process whose
open-files limit runs out (EMFILE) under a flood of connections keeps accepting once
descriptors are free again, says so in one line, and serves the next hello. (Issue 23:
the first EMFILE ended the acceptor thread for good, and the node daemon with it.)"""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from tests.integration.conftest import clean_env
from tfprof.agent.inprocess import frames

pytestmark = pytest.mark.timeout(120)

RELAY = """
import logging, os, resource, sys
from tfprof.agent.relay.socket_server import ConnectionLimits, RelayServer
logging.basicConfig(level=logging.WARNING, format="%(message)s")
hellos = []
def on_hello(info):
    hellos.append(info)
    print("hello", info.get("pid"), flush=True)
    return None
limits = ConnectionLimits(max_connections=10_000, max_per_uid=10_000, hello_timeout_s=60)
server = RelayServer(sys.argv[1], on_hello, 0o600, limits=limits)
server.start()
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 3, hard))
print("ready", flush=True)
sys.stdin.readline()  # the test has flooded us
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
print("raised", server.accept_errors, flush=True)
sys.stdin.readline()
print("done", server.accept_errors, len(hellos), flush=True)
"""


def test_the_accept_loop_survives_emfile_and_serves_the_next_hello() -> None:
    folder = Path(tempfile.mkdtemp(prefix="tfa-"))
    path = str(folder / "relay.sock")
    proc = subprocess.Popen(
        [sys.executable, "-c", RELAY, path], env=clean_env(), stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    errors: list[str] = []
    threading.Thread(target=lambda: errors.extend(proc.stderr), daemon=True).start()  # type: ignore[arg-type]
    held: list[socket.socket] = []
    try:
        assert proc.stdout.readline() == "ready\n"
        for _ in range(40):  # far more than the relay has descriptors for
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            s.connect(path)
            held.append(s)
        # Until the relay has run out and shed at least one of them (it closes what it
        # cannot serve, so that client sees the end of its connection at once).
        readable, _, _ = select.select(held, [], [], 30)
        shed = sum(s.recv(1) == b"" for s in readable)
        assert shed, "the relay never shed a connection it had no descriptor for"
        proc.stdin.write("\n")
        proc.stdin.flush()
        raised = proc.stdout.readline().split()
        assert raised[0] == "raised" and int(raised[1]) > 0
        for s in held:
            s.close()
        fresh = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        fresh.connect(path)
        fresh.sendall(frames.encode_json_frame(frames.FrameType.HELLO, {"pid": 4242}))
        assert proc.stdout.readline() == "hello 4242\n"  # the acceptor is alive
        fresh.close()
        proc.stdin.write("\n")
        proc.stdin.flush()
        done = proc.stdout.readline().split()
        assert done[0] == "done" and int(done[2]) == 1
        proc.stdin.close()
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        for s in held:
            s.close()
    said = [ln for ln in errors if "cannot accept connections" in ln]
    assert 1 <= len(said) <= 2, "".join(errors)  # once per 10 s, with the count
    assert "Too many open files" in said[0]
