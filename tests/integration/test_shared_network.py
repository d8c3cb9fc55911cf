"""Issue 23 on the network: any host that reaches the collector's port, as a hostile client
would. Real ``serve`` processes (one in a real memory cgroup), real launchers, raw gRPC
clients: an open non-loopback port is refused, tokens allow what they say and no more, a
batch past the memory cannot crash-loop the collector, hellos that store nothing leave
nothing, and runs end the way their processes did."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from tests.integration.collector_proc import start_serve
from tests.integration.conftest import agent_cmd, clean_env, collector_cmd
from tests.integration.memory_cgroup import memory_group
from tests.integration.node_fixture import TRACE, runs, wait_records
from tests.unit.agent_messages import batch, goodbye, hello
from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pb_grpc
from tfprof.readers import load_trace

pytestmark = pytest.mark.timeout(300)


def serve_refusal(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(collector_cmd("serve", "--data-dir", str(data), *args),
                          env=clean_env(), capture_output=True, text=True, timeout=60)  # fmt: skip


def call(address: str, messages: list[pb.AgentMessage], token: str = "") -> tuple[list[int], str]:
    metadata = (("authorization", f"Bearer {token}"),) if token else None
    with grpc.insecure_channel(address) as channel:
        acks: list[int] = []
        try:
            for ack in pb_grpc.CollectorStub(channel).Stream(
                iter(messages), metadata=metadata, timeout=60
            ):
                acks.append(ack.seq)
            return acks, "OK"
        except grpc.RpcError as exc:
            return acks, f"{exc.code().name}: {exc.details()}"


def start_capture(address: str, token: str = "") -> str:
    metadata = (("authorization", f"Bearer {token}"),) if token else None
    with grpc.insecure_channel(address) as channel:
        try:
            pb_grpc.CollectorStub(channel).StartCapture(
                pb.CaptureRequest(all=True, duration_ns=10**6), metadata=metadata, timeout=10
            )
            return "OK"
        except grpc.RpcError as exc:
            return exc.code().name


def test_an_open_non_loopback_port_is_refused_unless_declared_insecure(tmp_path: Path) -> None:
    refused = serve_refusal(tmp_path / "a", "--listen", "0.0.0.0:0")
    assert refused.returncode == 2
    (line,) = refused.stderr.splitlines()
    assert "reachable from other hosts" in line and "--insecure" in line
    assert not (tmp_path / "a").exists()  # refused before anything was made
    insecure = start_serve(tmp_path / "b", "--listen", "0.0.0.0:0", "--insecure")
    try:
        said = [ln for ln in insecure.lines if "WITHOUT authentication" in ln]
        assert len(said) == 1  # once per start
    finally:
        assert insecure.terminate() == 0
    token = tmp_path / "token"
    token.write_text("fleet-token-1\n")
    secured = start_serve(tmp_path / "c", "--listen", "0.0.0.0:0", "--auth-token-file", str(token))
    try:
        assert "WITHOUT authentication" not in secured.output()
        assert start_capture(secured.address) == "UNAUTHENTICATED"
    finally:
        assert secured.terminate() == 0


def non_loopback_address() -> str | None:
    """An address of this host other hosts could use (None: it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))  # no packet is sent
            address = str(probe.getsockname()[0])
        except OSError:
            return None
    return None if address.startswith("127.") else address


def test_without_tokens_capture_control_is_this_hosts_alone(tmp_path: Path) -> None:
    ip = non_loopback_address()
    if ip is None:
        pytest.skip("this host has no non-loopback address to call from")
    serve = start_serve(tmp_path / "data", "--listen", "0.0.0.0:0", "--insecure")
    port = serve.address.rsplit(":", 1)[1]
    try:
        assert start_capture(f"{ip}:{port}") == "PERMISSION_DENIED"
        assert start_capture(f"127.0.0.1:{port}") == "NOT_FOUND"  # allowed: no stream yet
    finally:
        assert serve.terminate() == 0


def mint(key: Path, *which: str) -> str:
    done = subprocess.run(collector_cmd("token", "--key-file", str(key), *which),
                          env=clean_env(), capture_output=True, text=True, timeout=60,
                          check=True)  # fmt: skip
    return done.stdout.strip()


def test_job_and_node_tokens_write_their_own_streams_only(traces: Path, tmp_path: Path) -> None:
    key, fleet = tmp_path / "token.key", tmp_path / "fleet"
    key.write_text("k" * 64 + "\n")
    fleet.write_text("fleet-token-2\n")
    alpha, node_b = mint(key, "--job", "alpha"), mint(key, "--node", "node-b")
    data = tmp_path / "data"
    serve = start_serve(data, "--token-key-file", str(key), "--auth-token-file", str(fleet))
    try:
        launcher = subprocess.run(
            agent_cmd("run", "--collector", serve.address, "--job", "alpha",
                      "--source", f"replay:{traces / TRACE}", "--replay-speed", "max",
                      "--host-metrics-interval", "0", "--", sys.executable, "-c", "pass"),
            env=clean_env(TFPROF_AUTH_TOKEN=alpha), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert launcher.returncode == 0, launcher.stderr
        assert wait_records(data, "alpha", len(load_trace(traces / TRACE))) > 0
        # alpha's token cannot write job beta, nor control captures.
        _, status = call(serve.address, [hello("beta", "s1"), batch(1, [5])], alpha)
        assert status.startswith("PERMISSION_DENIED") and "for job alpha, not beta" in status
        assert start_capture(serve.address, alpha) == "PERMISSION_DENIED"
        # node-b's token writes any job, from host node-b only (the hello says node-a).
        _, status = call(serve.address, [hello("beta", "s2"), batch(1, [5])], node_b)
        assert status.startswith("PERMISSION_DENIED") and "for host node-b" in status
        # The fleet token may: no stream is live, so nothing matches (not a refusal).
        assert start_capture(serve.address, "fleet-token-2") == "NOT_FOUND"
    finally:
        assert serve.terminate() == 0
    assert runs(data, "beta") == []


def big_batch(records: int) -> pb.AgentMessage:
    """Kernels with only kind, start and duration set: ~12 bytes each on the wire, 240 in
    the lake's shape."""
    b = pb.Batch(seq=1)
    now = time.time_ns()
    b.records.kind.extend([pb.KERNEL] * records)
    b.records.start_ns.extend(range(now, now + records * 100, 100))
    b.records.duration_ns.extend([90] * records)
    return pb.AgentMessage(batch=b)


def lake_rows(data: Path, job: str) -> int:
    import pyarrow.parquet as pq

    return sum(
        pq.ParquetFile(p).metadata.num_rows
        for p in (data / "lake" / "kernels").glob(f"job={job}/*/*.parquet")
    )


def test_a_batch_past_the_memory_limit_cannot_crash_loop_the_collector(tmp_path: Path) -> None:
    data = tmp_path / "data"
    flags = ("--max-inflight-bytes", "48M", "--compact-interval", "1")
    with memory_group(400 << 20) as group:
        serve = start_serve(data, *flags, preexec=group.enter())
        try:
            acks, status = call(serve.address, [hello("big", "s1"), big_batch(1_200_000)])
            assert acks == [0] and status.startswith("RESOURCE_EXHAUSTED"), status
            assert "--max-inflight-bytes" in status
            under = 190_000  # decodes to 45.6 MB: stored, then compacted a chunk at a time
            acks, status = call(
                serve.address, [hello("under", "s1"), big_batch(under), goodbye(under)]
            )
            assert (acks, status) == ([0, 1], "OK")
            deadline = time.monotonic() + 60
            while lake_rows(data, "under") < under and time.monotonic() < deadline:
                time.sleep(0.5)
            assert lake_rows(data, "under") == under
        finally:
            assert serve.terminate() == 0, serve.output()
        for _ in range(2):  # restarts on the same data dir, in the same limit
            again = start_serve(data, *flags, preexec=group.enter())
            assert again.healthy()
            assert again.terminate() == 0, again.output()
        assert group.oom_kills == 0
        assert group.peak_bytes < 400 << 20


def test_a_batch_that_can_never_be_compacted_is_quarantined_once(tmp_path: Path) -> None:
    data = tmp_path / "data"
    serve = start_serve(data, "--compact-interval", "1")
    bad = batch(1, [5])
    bad.batch.records.block_x[0] = 70_000  # no CUDA block is that wide: uint16 in the lake
    try:
        acks, status = call(serve.address, [hello("odd", "s1"), bad, goodbye(1)])
        assert (acks, status) == ([0, 1], "OK")
        deadline = time.monotonic() + 30
        while "quarantined" not in serve.output() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        assert serve.terminate() == 0
    lines = [ln for ln in serve.lines if "quarantined" in ln]
    assert len(lines) == 1 and "block_x 70000 does not fit uint16" in lines[0]
    again = start_serve(data, "--compact-interval", "1")
    try:
        assert again.healthy()
    finally:
        assert again.terminate() == 0
    assert "quarantined" not in again.output() and "not compacted" not in again.output()


def test_hellos_that_store_nothing_leave_nothing_and_refusals_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    serve = start_serve(data, "--empty-stream-grace", "1", "--hello-timeout", "1")
    try:
        with ThreadPoolExecutor(16) as pool:
            outcomes = list(pool.map(
                lambda i: call(serve.address, [hello("litter", uuid.uuid4().hex)])[1],
                range(200),
            ))  # fmt: skip
        assert outcomes.count("OK") == 200
        kept = call(serve.address, [hello("kept", "s1"), batch(1, [5]), goodbye(1)])
        assert kept == ([0, 1], "OK")

        with ThreadPoolExecutor(20) as pool:
            ends = list(pool.map(lambda _: _silent_call(serve.address), range(20)))
        assert set(ends) == {"DEADLINE_EXCEEDED"}
        deadline = time.monotonic() + 30
        while (data / "jobs" / "litter").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not (data / "jobs" / "litter").exists()
        assert runs(data, "kept")[0].records == 1
    finally:
        assert serve.terminate() == 0
    timeouts = [ln for ln in serve.lines if "no hello within" in ln]
    assert 1 <= len(timeouts) <= 2, serve.output()[-2000:]


def _silent_call(address: str) -> str:
    """A stream that never says hello: its connection stays open past the timeout."""

    def never() -> object:
        time.sleep(5)
        return
        yield

    with grpc.insecure_channel(address) as channel:
        try:
            for _ack in pb_grpc.CollectorStub(channel).Stream(never(), timeout=20):  # type: ignore[arg-type]
                pass
        except grpc.RpcError as exc:
            return str(exc.code().name)
    return "OK"


FORKS = """
import os
pids = []
for _ in range(40):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    pids.append(pid)
for pid in pids:
    os.waitpid(pid, 0)
"""


def launcher(address: str, traces: Path, job: str, code: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        agent_cmd("run", "--collector", address, "--job", job,
                  "--source", f"replay:{traces / TRACE}", "--replay-speed", "max",
                  "--host-metrics-interval", "0", "--", sys.executable, "-c", code),
        env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def settled(data: Path, job: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        infos = runs(data, job)
        if infos and all(i.state != "streaming" for i in infos):
            break
        time.sleep(0.2)
    (info,) = runs(data, job)
    return info.state + "".join(f"; {n} {how}" for how, n in sorted(info.ended.items()))


def test_runs_ended_by_sigterm_or_os_exit_are_finished(traces: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    serve = start_serve(data)
    try:
        term = launcher(serve.address, traces, "term", "import time; time.sleep(120)")
        wait_records(data, "term", len(load_trace(traces / TRACE)))
        term.send_signal(signal.SIGTERM)  # as a scheduler ends a job
        _, err = term.communicate(timeout=120)
        assert term.returncode == -signal.SIGTERM and "0 dropped" in err, err
        assert settled(data, "term") == "finished; 1 ended by signal 15"
        forks = launcher(serve.address, traces, "forks", FORKS)
        _, err = forks.communicate(timeout=180)
        assert forks.returncode == 0, err
        state = settled(data, "forks")
        assert state.startswith("finished"), state
    finally:
        assert serve.terminate() == 0
