"""The collector daemon as operators run it: config file and environment, metrics over
HTTP, TLS with a bearer token, graceful SIGTERM, ``jobs`` states and retention at start."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.integration.collector_proc import start_serve
from tests.integration.conftest import agent_cmd, clean_env, collector_cmd
from tests.unit.tls_certs import make_cert
from tfprof.collector.store import Store
from tfprof.core.version import PROTOCOL_VERSION
from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pb_grpc

pytestmark = pytest.mark.timeout(120)
_END = object()


def hello(job: str = "train", stream_id: str = "s1") -> pb.AgentMessage:
    h = pb.Hello(
        protocol_version=PROTOCOL_VERSION,
        stream_secret=b"s" * 32,
        job=job,
        run_id="run1",
        stream_id=stream_id,
        host="node-a",
        pid=7,
    )
    h.task = "0"
    return pb.AgentMessage(hello=h)


def batch(seq: int, n: int = 100, dropped: int = 0) -> pb.AgentMessage:
    b = pb.Batch(seq=seq, dropped=dropped)
    base = 1_700_000_000_000_000_000 + seq * 1_000_000
    b.records.kind.extend([pb.KERNEL] * n)
    b.records.start_ns.extend(range(base, base + n * 1000, 1000))
    b.records.duration_ns.extend([500] * n)
    return pb.AgentMessage(batch=b)


def open_call(stub: pb_grpc.CollectorStub) -> tuple[queue.Queue[object], Iterator[pb.Ack]]:
    requests: queue.Queue[object] = queue.Queue()

    def feed() -> Iterator[pb.AgentMessage]:
        while (item := requests.get(timeout=60)) is not _END:
            assert isinstance(item, pb.AgentMessage)
            yield item

    # iter() of a grpc call is the call itself; it types the acks as an iterator.
    return requests, iter(stub.Stream(feed(), timeout=60))


def test_sigterm_lets_a_running_stream_finish_and_exits_0(tmp_path: Path) -> None:
    data = tmp_path / "data"
    serve = start_serve(data, "--grace", "20")
    with grpc.insecure_channel(serve.address) as ch:
        stub = pb_grpc.CollectorStub(ch)
        requests, acks = open_call(stub)
        requests.put(hello())
        assert next(acks).seq == 0
        for seq in range(1, 6):
            requests.put(batch(seq))
            assert next(acks).seq == seq
        serve.proc.send_signal(15)
        time.sleep(1.5)  # the collector is draining now
        assert serve.proc.poll() is None
        # New calls are refused while the running one goes on.
        with grpc.insecure_channel(serve.address) as other, pytest.raises(grpc.RpcError):
            pb_grpc.CollectorStub(other).Clock(pb.ClockRequest(t1_ns=1), timeout=3)
        for seq in range(6, 11):
            requests.put(batch(seq))
            assert next(acks).seq == seq
        requests.put(pb.AgentMessage(goodbye=pb.Goodbye(records_sent=1000)))
        requests.put(_END)
        assert list(acks) == []
    assert serve.proc.wait(30) == 0, serve.output()
    (job,) = Store(data).load_jobs(["train"])
    assert job.num_records == 1000
    assert job.streams[0].finished
    assert "shutting down: 1 stream(s) open" in serve.output()


def test_config_file_env_and_metrics_over_http(tmp_path: Path) -> None:
    data = tmp_path / "data"
    config = tmp_path / "collector.toml"
    config.write_text(f'data-dir = "{data}"\nmetrics-listen = "127.0.0.1:0"\nmax-workers = 8\n')
    # Flag, file and environment all contribute; the env one is overridden by the file.
    serve = start_serve(data, "--config", str(config), "--metrics-listen", "127.0.0.1:0",
                        env={"TFPROF_COLLECTOR_MAX_WORKERS": "0"})  # fmt: skip
    try:
        assert serve.metrics_url is not None
        with grpc.insecure_channel(serve.address) as ch:
            stub = pb_grpc.CollectorStub(ch)
            msgs = [hello(), batch(1, 10), batch(2, 20, dropped=3), batch(2, 20), pb.AgentMessage(
                goodbye=pb.Goodbye(records_sent=30, dropped_queue=3))]  # fmt: skip
            assert [a.seq for a in stub.Stream(iter(msgs), timeout=30)] == [0, 1, 2, 2]
        with urllib.request.urlopen(serve.metrics_url, timeout=10) as reply:
            text = reply.read().decode()
        for line in (
            "tfprof_collector_records_ingested_total 30.0",
            "tfprof_collector_batches_acknowledged_total 3.0",
            "tfprof_collector_duplicate_batches_ignored_total 1.0",
            'tfprof_collector_agent_dropped_records_total{reason="queue"} 3.0',
            "tfprof_collector_active_streams 0.0",
        ):
            assert line in text, line
        assert "stream s1 of job train run run1 (node-a pid 7) opened at seq 0" in serve.output()
    finally:
        assert serve.terminate() == 0


def test_bad_config_exits_2_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('data-dir = "/x"\nretain-bytes = "lots"\n')
    result = subprocess.run(collector_cmd("serve", "--config", str(config)), capture_output=True,
                            text=True, env=clean_env(), timeout=60)  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"tfprof-collector: retain-bytes in {config}='lots': "
        "expected a size such as 1048576, 512M or 10G"
    ]


def test_tls_and_token_end_to_end(tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path)
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    data = tmp_path / "data"
    serve = start_serve(data, "--tls-cert", str(cert), "--tls-key", str(key),
                        env={"TFPROF_COLLECTOR_AUTH_TOKEN_FILE": str(token)})  # fmt: skip
    try:
        creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        with grpc.secure_channel(serve.address, creds) as ch:
            stub = pb_grpc.CollectorStub(ch)
            with pytest.raises(grpc.RpcError) as info:
                list(stub.Stream(iter([hello(), batch(1)]), timeout=30))
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert not any(data.glob("jobs/*"))
            meta = (("authorization", "Bearer s3cret"),)
            acks = stub.Stream(iter([hello(), batch(1)]), metadata=meta, timeout=30)
            assert [a.seq for a in acks] == [0, 1]
    finally:
        assert serve.terminate() == 0
    assert "refused /tfprof.v1.Collector/Stream" in serve.output()
    (job,) = Store(data).load_jobs()
    assert job.num_records == 100


def test_the_agent_speaks_tls_with_its_token(tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path)
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    data, spool = tmp_path / "data", tmp_path / "spool"
    serve = start_serve(data, "--tls-cert", str(cert), "--tls-key", str(key),
                        "--auth-token-file", str(token))  # fmt: skip
    script = "print('trained')"
    try:
        for job, secret in (("with-token", "s3cret"), ("without-token", "")):
            run = subprocess.run(
                agent_cmd("run", "--collector", serve.address, "--tls-ca", str(cert),
                          "--job", job, "--source", "none", "--spool-dir", str(spool),
                          "--", sys.executable, "-c", script),
                env=clean_env(TFPROF_AUTH_TOKEN=secret),
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert run.returncode == 0, run.stderr
            assert run.stdout == "trained\n"
            if not secret:
                # Refused: said once, nothing stored, the stream waits in the spool.
                assert run.stderr.count("UNAUTHENTICATED") == 1, run.stderr
    finally:
        assert serve.terminate() == 0
    stored = Store(data).load_jobs()
    assert [j.name for j in stored] == ["with-token"]
    assert list(spool.glob("*/without-token/*/*/hello.pb"))


def run_cli(*args: str) -> str:
    result = subprocess.run(collector_cmd(*args), capture_output=True, text=True,
                            env=clean_env(), timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_jobs_lists_states_and_retention_runs_at_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    serve = start_serve(data)
    try:
        with grpc.insecure_channel(serve.address) as ch:
            stub = pb_grpc.CollectorStub(ch)
            list(stub.Stream(iter([hello("done"), batch(1), pb.AgentMessage(
                goodbye=pb.Goodbye())]), timeout=30))  # fmt: skip
            list(stub.Stream(iter([hello("cut"), batch(1)]), timeout=30))
            requests, acks = open_call(stub)
            requests.put(hello("live"))
            requests.put(batch(1, 7))
            assert [next(acks).seq, next(acks).seq] == [0, 1]
            listing = run_cli("jobs", "--data-dir", str(data))
            table, _, notes = listing.partition("\n\n")  # notes follow a blank line
            states = {ln.split()[0]: ln.split()[2] for ln in table.splitlines()[1:]}
            assert states == {"cut": "incomplete", "done": "finished", "live": "streaming"}
            assert "cut run1: incomplete: agent lost: no goodbye from 1 stream(s)" in notes
            assert "TASKS" in listing.splitlines()[0]
            requests.put(_END)
            list(acks)
    finally:
        assert serve.terminate() == 0
    # Everything is ten days old now; a collector started with --retain-days 7 deletes the
    # finished and the incomplete run before it serves.
    old = time.time() - 10 * 86_400
    for p in data.rglob("*"):
        os.utime(p, (old, old))
    serve = start_serve(data, "--retain-days", "7")
    try:
        assert "retention: deleted job done run run1" in serve.output()
        assert sorted(p.name for p in (data / "jobs").iterdir()) == []
    finally:
        assert serve.terminate() == 0
