"""Bad input, metrics, reflection and concurrent reconnects against an in-process collector."""

from __future__ import annotations

import threading
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.unit.agent_messages import batch, goodbye, hello, rejected, run_stream
from tfprof.collector.errors import InvalidArgument
from tfprof.collector.service.metrics import CollectorMetrics, serve_metrics
from tfprof.collector.service.server import CollectorServer
from tfprof.collector.service.validate import MAX_TIME_NS, NS_PER_DAY, check_batch, check_hello
from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pb_grpc

pytestmark = pytest.mark.timeout(60)
RPC_TIMEOUT = 10.0


def stored_records(server: CollectorServer) -> int:
    return sum(s.num_records for j in server.store.load_jobs() for s in j.streams)


def raw_stream(channel: grpc.Channel, payloads: list[bytes]) -> grpc.RpcError | list[bytes]:
    call = channel.stream_stream("/tfprof.v1.Collector/Stream", None, None)
    try:
        return list(call(iter(payloads), timeout=RPC_TIMEOUT))
    except grpc.RpcError as exc:
        return exc


def with_batch(**fields: object) -> pb.AgentMessage:
    msg = batch(1, [1_000, 2_000])
    for path, value in fields.items():
        column = getattr(msg.batch.records, path)
        column[:] = value
    return msg


@pytest.mark.parametrize(
    ("message", "detail"),
    [
        (with_batch(start_ns=[-1, 5]), "negative record start_ns -1"),
        (with_batch(start_ns=[1, MAX_TIME_NS]), "after the year 2200"),
        (with_batch(duration_ns=[NS_PER_DAY + 1, 1]), "over a day"),
        (with_batch(kind=[1, 99]), "unknown record kind(s) [99]"),
    ],
)
def test_absurd_records_are_refused_whole(
    collector: CollectorServer, stub: pb_grpc.CollectorStub, message: pb.AgentMessage, detail: str
) -> None:
    good = batch(1, [10])
    message.batch.seq = 2
    err = rejected(stub, [hello(), good, message])
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert detail in (err.details() or "")
    # The good batch is kept, nothing of the bad one is.
    (job,) = collector.store.load_jobs()
    assert job.streams[0].records["start_ns"].tolist() == [10]


def bad_hello(**fields: object) -> pb.AgentMessage:
    msg = hello()
    for key, value in fields.items():
        if key.startswith("clock."):
            setattr(msg.hello.clock, key[6:], value)
        else:
            setattr(msg.hello, key, value)
    return msg


@pytest.mark.parametrize(
    ("message", "detail"),
    [
        (bad_hello(host=""), "host is empty"),
        (bad_hello(host="node\x00a"), "control characters"),
        (bad_hello(task="0\n1"), "task"),
        (bad_hello(host="h" * 300), "at most 256"),
        (bad_hello(run_id=".."), "invalid run id"),
        (bad_hello(run_id="r" * 65), "invalid run id"),
        (bad_hello(stream_id="s\x7f"), "invalid stream id"),
        (bad_hello(job="a\\b"), "invalid job name"),
        (bad_hello(clock_offset_ns=-(MAX_TIME_NS + 1)), "clock offset"),
        (bad_hello(clock_rtt_ns=-5), "negative clock round trip"),
        (bad_hello(**{"clock.tracer_ns": 2**63 - 1}), "tracer time"),
    ],
)
def test_bad_hellos_are_refused_before_anything_is_written(
    collector: CollectorServer, stub: pb_grpc.CollectorStub, message: pb.AgentMessage, detail: str
) -> None:
    err = rejected(stub, [message, batch(1, [1])])
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert detail in (err.details() or "")
    assert list((collector.store.jobs_dir).rglob("*")) == []


def test_malformed_bytes_get_invalid_argument(collector: CollectorServer) -> None:
    valid = hello().SerializeToString()
    with grpc.insecure_channel(collector.address) as ch:
        for payloads in ([b"\xff\xff\xff"], [valid, b"\x12\x05\x08"], [valid[:-3]]):
            err = raw_stream(ch, payloads)
            assert isinstance(err, grpc.RpcError)
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, payloads
            assert "malformed AgentMessage" in (err.details() or "")
        clock = ch.unary_unary("/tfprof.v1.Collector/Clock", None, None)
        with pytest.raises(grpc.RpcError) as info:
            clock(b"\xff\xff", timeout=RPC_TIMEOUT)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (
        collector.metrics.value("tfprof_collector_request_errors_total", code="INVALID_ARGUMENT")
        == 4
    )


def test_oversized_messages_get_a_precise_resource_exhausted(tmp_path: Path) -> None:
    server = CollectorServer("127.0.0.1:0", str(tmp_path / "d"), max_workers=4,
                             max_message_bytes=4096).start()  # fmt: skip
    try:
        with grpc.insecure_channel(server.address) as ch:
            stub = pb_grpc.CollectorStub(ch)
            err = rejected(stub, [hello(), batch(1, list(range(2000)))])
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "over this collector's limit of 4096" in (err.details() or "")
            # Far beyond the limit gRPC refuses it itself, with the same code.
            err = rejected(stub, [hello(), batch(1, list(range(400_000)))])
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert run_stream(stub, [hello(stream_id="ok"), batch(1, [5]), goodbye(1)]) == [0, 1]
        assert stored_records(server) == 1
    finally:
        server.stop(grace=1.0)


def test_check_batch_reports_the_raw_span() -> None:
    stats = check_batch(batch(1, [100, 50, 300]).batch)
    assert (stats.records, stats.first_start_ns, stats.last_end_ns) == (3, 50, 350)
    with pytest.raises(InvalidArgument, match="cpu_percent"):
        b = pb.Batch(seq=1)
        b.host.time_ns.append(1)
        for col in ("cpu_percent", "rss_bytes", "threads", "read_bytes", "write_bytes"):
            getattr(b.host, col).append(0)
        b.host.cpu_percent[0] = float("nan")
        check_batch(b)
    check_hello(hello().hello)


def test_concurrent_calls_with_one_stream_id_store_each_batch_once(
    collector: CollectorServer, stub: pb_grpc.CollectorStub
) -> None:
    # Four calls replay the same stream with its secret at once (reconnects racing the
    # old calls): each newer hello takes the stream over and the older call ends ABORTED
    # at once; every sequence number lands once, and the log stays well-formed.
    n = 200
    results: list[list[int] | grpc.RpcError] = []

    def replay() -> None:
        msgs = [hello()] + [batch(i, [i * 10, i * 10 + 1]) for i in range(1, n + 1)]
        try:
            results.append(run_stream(stub, msgs))
        except grpc.RpcError as exc:
            results.append(exc)

    threads = [threading.Thread(target=replay) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 4
    done = [r for r in results if isinstance(r, list)]
    aborted = [r for r in results if isinstance(r, grpc.RpcError)]
    # A call that finished acknowledged up to the last batch; one that took the stream
    # over after others stored some starts from where they got to.
    assert done and all(r == sorted(r) and r[-1] == n and len(r) == n + 1 for r in done)
    for exc in aborted:
        assert exc.code() == grpc.StatusCode.ABORTED
        assert "resumed on a newer call" in (exc.details() or "")
    (job,) = collector.store.load_jobs()
    starts = job.streams[0].records["start_ns"].tolist()
    assert starts == [v for i in range(1, n + 1) for v in (i * 10, i * 10 + 1)]
    m = collector.metrics
    assert m.value("tfprof_collector_active_streams") == 0


def test_metrics_count_what_was_ingested(
    collector: CollectorServer, stub: pb_grpc.CollectorStub
) -> None:
    first = batch(1, [1, 2, 3])
    first.batch.dropped = 4
    second = batch(2, [4])
    second.batch.dropped = 6
    bye = pb.AgentMessage(goodbye=pb.Goodbye(records_sent=4, dropped_queue=7, dropped_tracer=2,
                                             dropped_relay=1))  # fmt: skip
    run_stream(stub, [hello(), first, second])
    run_stream(stub, [hello(), second, bye])  # a replay of batch 2 after a reconnect
    assert rejected(stub, [batch(1, [1])]).code() == grpc.StatusCode.FAILED_PRECONDITION

    m = collector.metrics
    assert m.value("tfprof_collector_records_ingested_total") == 4
    assert m.value("tfprof_collector_batches_acknowledged_total") == 3
    assert m.value("tfprof_collector_duplicate_batches_ignored_total") == 1
    assert m.value("tfprof_collector_streams_opened_total") == 2
    assert m.value("tfprof_collector_active_streams") == 0
    assert m.value("tfprof_collector_agent_dropped_records_total", reason="queue") == 7
    assert m.value("tfprof_collector_agent_dropped_records_total", reason="tracer") == 2
    assert m.value("tfprof_collector_agent_dropped_records_total", reason="relay") == 1
    assert m.value("tfprof_collector_request_errors_total", code="FAILED_PRECONDITION") == 1
    stored = m.value("tfprof_collector_bytes_ingested_total")
    log = next(collector.store.jobs_dir.rglob("batches.log"))
    assert stored == log.stat().st_size
    assert m.value("tfprof_collector_storage_bytes") >= stored


def test_metrics_are_served_over_http() -> None:
    metrics = CollectorMetrics()
    metrics.batch_stored(records=5, nbytes=100)
    server, address = serve_metrics(metrics, "127.0.0.1:0")
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
            text = reply.read().decode()
    finally:
        server.shutdown()
    assert "tfprof_collector_records_ingested_total 5.0" in text
    assert "tfprof_collector_active_streams 0.0" in text


def test_reflection_lists_the_collector_service(channel: grpc.Channel) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    (reply,) = list(stub.ServerReflectionInfo(iter([request]), timeout=RPC_TIMEOUT))
    names = {s.name for s in reply.list_services_response.service}
    assert {"tfprof.v1.Collector", "grpc.health.v1.Health"} <= names

    request = reflection_pb2.ServerReflectionRequest(file_containing_symbol="tfprof.v1.Collector")
    (reply,) = list(stub.ServerReflectionInfo(iter([request]), timeout=RPC_TIMEOUT))
    assert reply.file_descriptor_response.file_descriptor_proto


def test_a_hostile_string_base_or_clock_in_a_batch_is_refused() -> None:
    # Either would otherwise be stored and poison every later load of the job: a huge
    # placeholder table, or start times shifted past int64.
    b = batch(1, [100]).batch
    b.string_base = 50_000_000
    b.strings.append("gemm")
    with pytest.raises(InvalidArgument, match="string table"):
        check_batch(b)
    b = batch(1, [100]).batch
    b.clock_updated = True
    b.clock_offset_ns = 2**62
    with pytest.raises(InvalidArgument, match="clock offset"):
        check_batch(b)
    b.clock_offset_ns, b.clock_rtt_ns = -5 * 10**9, -1
    with pytest.raises(InvalidArgument, match="negative clock round trip"):
        check_batch(b)
    b.clock_rtt_ns = 1_000
    check_batch(b)


POISON = 7_258_118_400_000_000_000  # each clock snapshot in bounds, their difference not


def test_values_readers_derive_are_checked_at_ingest(
    collector: CollectorServer, stub: pb_grpc.CollectorStub
) -> None:
    poisoned = bad_hello(**{"clock.realtime_ns": POISON, "clock.tracer_ns": -POISON})
    err = rejected(stub, [poisoned, batch(1, [1])])
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "out of range" in (err.details() or "")
    assert list(collector.store.jobs_dir.rglob("*")) == []
    huge = pb.AgentMessage(goodbye=pb.Goodbye(dropped_relay=2**64 - 1))
    err = rejected(stub, [hello(), batch(1, [1]), huge])
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "goodbye counts" in (err.details() or "")
    # A tracer clock far from realtime moves records past int64: refused, not wrapped.
    shifted = bad_hello(stream_id="s2", **{"clock.realtime_ns": POISON, "clock.tracer_ns": 1})
    err = rejected(stub, [shifted, batch(1, [POISON - 1])])
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "clock shift" in (err.details() or "")
    (job,) = collector.store.load_jobs()  # what was accepted still reads
    assert job.num_records == 1
