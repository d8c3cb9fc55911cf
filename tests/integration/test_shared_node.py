"""Issue 23 on a shared node: a second local user attacks the node daemon's socket (mode
0666: every user's jobs connect to it) as a hostile user would, and a victim user's jobs
must go on being traced, whole, their runs theirs and their files unreadable to others.
Real processes throughout: a collector, a node daemon as root, jobs and attacker programs
run as throwaway users made with useradd (skipped, with the reason, where that cannot
be done)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import start_collector
from tests.integration.daemon_proc import Daemon
from tests.integration.local_users import SYSTEM_PYTHON, User, local_users, rss_bytes
from tests.integration.node_fixture import Node, finish, make_node, runs, wait_records
from tfprof.proto import collector_pb2 as pb

pytestmark = pytest.mark.timeout(300)

# The attacker's programs: the standard library only, as any user of the node has.
FLOOD = """
import socket, sys
held, errors = [], set()
for _ in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(sys.argv[1])
        held.append(s)
    except OSError as exc:
        errors.add(repr(exc))
        s.close()
print(len(held), *sorted(errors), flush=True)
sys.stdin.read()  # held until the test closes our stdin
"""
OVERSIZE = """
import socket, struct, sys
results = []
for _ in range(3):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sys.argv[1])
    sent = 0
    try:
        s.sendall(struct.pack("<BI", 1, (1 << 30) - 1))  # a 1 GiB hello, no payload yet
        for _ in range(32):
            s.sendall(bytes(1 << 20))
            sent += 1
    except OSError as exc:
        results.append(f"{sent}:{type(exc).__name__}")
    else:
        results.append(f"{sent}:accepted")
print(" ".join(results), flush=True)
"""
INJECT = """
import json, os, socket, struct, sys, time
sys.path.insert(0, os.path.join(sys.argv[2], "hook-lib"))  # the bootstrap every user reads
from tfprof.agent.inprocess import frames, identity
from tfprof.core.records import COLUMNS
scheduler = identity.scheduler_job({"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "resnet"})
job, run_id = identity.resolve("resnet", "", scheduler, ["python", "train.py"])
now = time.time_ns()
hello = {"job": job, "run_id": run_id, "pid": os.getpid(), "task": "0", "capture": "always",
         "argv": ["python", "train.py"], "source": "cupti",
         "clock": {"realtime_ns": now, "monotonic_ns": time.monotonic_ns(), "tracer_ns": now}}
n = 1000
cols = {c: [0] * n for c in COLUMNS}
cols["kind"] = [1] * n
cols["start_ns"] = [now + i for i in range(n)]
cols["duration_ns"] = [9] * n
payload = struct.pack("<QIII", 0, 1, 0, n)
payload += b"".join(struct.pack(f"<{n}q", *cols[c]) for c in COLUMNS)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
try:
    s.sendall(frames.encode_json_frame(frames.FrameType.HELLO, hello))
    time.sleep(0.5)
    s.sendall(struct.pack("<BI", frames.FrameType.RECORDS, len(payload)) + payload)
    s.sendall(frames.encode_json_frame(frames.FrameType.GOODBYE, {"records_sent": n}))
    s.shutdown(socket.SHUT_WR)
    while s.recv(4096):
        pass
    print("injected", run_id, flush=True)
except OSError as exc:
    print("refused", run_id, type(exc).__name__, flush=True)
"""
SNOOP = """
import os, sys
readable = []
for root in sys.argv[1:]:
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                with open(os.path.join(dirpath, name), "rb") as f:
                    readable.append(f.read())
            except OSError:
                pass
print(len(readable), sum(b"SECRET123" in data for data in readable), flush=True)
"""


@pytest.fixture
def node(traces: Path) -> Iterator[Node]:
    yield from make_node(traces)


@pytest.fixture
def users() -> Iterator[list[User]]:
    with local_users("alice", "mal") as made:
        yield made


@contextlib.contextmanager
def served(node: Node, data: Path, *flags: str, nofile: int | None = None) -> Iterator[Daemon]:
    """A collector storing in ``data`` and the node's daemon relaying to it (``flags``,
    ``nofile``: as ``Node.start_daemon`` takes them), both stopped when the block ends."""
    collector = start_collector(data)
    daemon = node.start_daemon(collector.address, *flags, nofile=nofile)
    try:
        yield daemon
    finally:
        daemon.stop()
        collector.stop()


def attack(node: Node, user: User, code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        user.argv([SYSTEM_PYTHON, "-c", code, *args]), stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


def victim_job(node: Node, victim: User, data: Path, job: str, repeat: int = 2) -> None:
    """A job of the victim through the daemon; every record it replayed is stored."""
    proc = node.run_as(victim, node.job_env(job, repeat), "print('done')")
    out, err = finish(proc)
    assert proc.returncode == 0 and out == "done\n", err
    expected = node.records_per_replay * repeat
    assert wait_records(data, job, expected) == expected, err
    assert "tfprof:" not in err, err


def test_a_connection_flood_of_one_user_leaves_the_others_served(
    node: Node, users: list[User], tmp_path: Path
) -> None:
    victim, attacker = users
    data = tmp_path / "data"
    # systemd's default soft limit: the flood used to take it all (and the acceptor).
    with served(node, data, "--max-connections-per-uid", "8", "--hello-timeout", "30",
                nofile=1024) as daemon:  # fmt: skip
        flood = attack(node, attacker, FLOOD, str(node.socket), "200")
        assert flood.stdout is not None
        opened = flood.stdout.readline()
        assert opened.split()[0] == "200", opened  # the kernel took them all: the backlog
        victim_job(node, victim, data, "during")  # the victim's uid has its own share
        assert flood.stdin is not None
        flood.stdin.close()  # the attacker lets go
        flood.wait(30)
        victim_job(node, victim, data, "after")
    refusals = [ln for ln in daemon.lines if "refused a connection" in ln]
    assert 1 <= len(refusals) <= 2, daemon.output()  # one line per 10 s, with the count
    assert f"uid {attacker.uid} holds its limit of 8 connections" in refusals[0]


def test_a_header_claiming_a_gigabyte_before_hello_costs_the_daemon_nothing(
    node: Node, users: list[User], tmp_path: Path
) -> None:
    victim, attacker = users
    data = tmp_path / "data"
    with served(node, data) as daemon:
        before = rss_bytes(daemon.proc.pid)
        proc = attack(node, attacker, OVERSIZE, str(node.socket))
        out, _ = finish(proc, 60)
        grew = rss_bytes(daemon.proc.pid) - before
        # Each connection was closed at its header: nothing of the 32 MiB was taken.
        assert all(not r.endswith("accepted") for r in out.split()), out
        assert grew < 16 << 20, f"daemon RSS grew by {grew:,} bytes"
        victim_job(node, victim, data, "meanwhile")
    assert "(the limit is 65,536)" in daemon.output()


def test_a_fake_hook_cannot_join_another_users_run(
    node: Node, users: list[User], tmp_path: Path
) -> None:
    victim, attacker = users
    data = tmp_path / "data"
    slurm = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "resnet"}
    with served(node, data) as daemon:
        ranks = [
            node.run_as(victim, node.job_env("resnet", 1, SLURM_PROCID=rank, **slurm), "pass")
            for rank in ("0", "1")
        ]  # two processes of the victim join the one run
        for proc in ranks:
            assert finish(proc)[0] == "" and proc.returncode == 0
        out, err = finish(attack(node, attacker, INJECT, str(node.socket),
                                 str(node.folder / "bootstrap")), 60)  # fmt: skip
        assert out.startswith("refused "), out + err
        # Root may join (the daemon says so at start): a root process of the same run.
        root = node.run_as(None, node.job_env("resnet", 1, SLURM_PROCID="2", **slurm), "pass")
        assert finish(root)[1].count("tfprof:") == 0
        deadline = time.monotonic() + 30  # until the three streams said goodbye
        while (
            time.monotonic() < deadline and len(list(data.glob("jobs/resnet/*/*/goodbye.pb"))) < 3
        ):
            time.sleep(0.2)
    (run,) = runs(data, "resnet")
    assert run.path is not None
    hellos = [pb.Hello.FromString(p.read_bytes()) for p in run.path.glob("*/hello.pb")]
    assert sorted(h.uid for h in hellos) == [0, victim.uid, victim.uid]  # none the attacker's
    assert not any("train.py" in h.argv for h in hellos)
    sent = sum(pb.Goodbye.FromString(p.read_bytes()).records_sent
               for p in run.path.glob("*/goodbye.pb"))  # fmt: skip
    assert run.records == sent > 0  # what the three processes sent, and nothing else
    assert "root may join any run" in daemon.output()
    assert f"of uid {attacker.uid}: job resnet run {run.run_id} belongs to uid" in daemon.output()


def modes_under(root: Path) -> set[str]:
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            found.add(stat.filemode(os.lstat(os.path.join(dirpath, name)).st_mode))
    return found


def test_spool_and_data_dir_are_their_owners_and_argv_secrets_are_masked(
    node: Node, users: list[User], tmp_path: Path
) -> None:
    victim, attacker = users
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)  # as an older release left it
    with socket.socket() as probe:  # a port with no collector behind it, for now
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    daemon = node.start_daemon(address)
    try:
        env = node.job_env("secrets", 1)
        proc = node.run_as(victim, env, "pass", "--api-key=SECRET123", "--lr", "0.1")
        finish(proc)
    finally:
        daemon.stop()  # the collector is down: the streams stay in the spool
    spool = node.folder / "spool"
    hellos = list(spool.glob("*/secrets/*/*/hello.pb"))
    assert hellos, "nothing was spooled"
    assert modes_under(spool) <= {"drwx------", "-rw-------"}
    spooled = pb.Hello.FromString(hellos[0].read_bytes())
    assert list(spooled.argv)[-3:] == ["--api-key=***", "--lr", "0.1"]
    collector = start_collector(data, listen=address)
    daemon = node.start_daemon(address)  # flushes the spool to the collector
    try:
        assert wait_records(data, "secrets", node.records_per_replay) > 0
    finally:
        daemon.stop()
        collector.stop()
    assert stat.S_IMODE(data.stat().st_mode) == 0o750
    assert modes_under(data / "jobs") <= {"drwxr-x---", "-rw-r-----"}
    out, _ = finish(attack(node, attacker, SNOOP, str(spool), str(data)), 60)
    assert out.split() == ["0", "0"]  # nothing readable, nothing holding the secret
    stored = [p.read_bytes() for p in data.glob("jobs/secrets/*/*/hello.pb")]
    assert stored and not any(b"SECRET123" in h for h in stored)


def test_a_daemon_traced_job_ended_by_sigterm_is_finished(
    node: Node, users: list[User], tmp_path: Path
) -> None:
    victim, _ = users
    data = tmp_path / "data"
    with served(node, data):
        env = node.job_env("dterm", 1)
        proc = node.run_as(victim, env, "import time; time.sleep(120)")
        assert wait_records(data, "dterm", node.records_per_replay) == node.records_per_replay
        os.killpg(proc.pid, signal.SIGTERM)  # as a scheduler ends a job
        finish(proc, 60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = [i.state for i in runs(data, "dterm")]
            if states and "streaming" not in states:
                break
            time.sleep(0.2)
    (run,) = runs(data, "dterm")
    assert run.state == "finished", run.reason
    (how,) = run.ended  # the note `jobs` shows under its table
    assert how.startswith(("ended by signal 15", "ended (os._exit")), how
