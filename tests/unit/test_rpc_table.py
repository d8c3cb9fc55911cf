"""The collector answers exactly the methods collector.proto declares, each with the
streaming kinds and message types it declares: the handler table is made from the
descriptor (service/rpc_table.py), and this holds it to the .proto file's own text."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest

from tfprof.collector.service.rpc_table import SERVICE_NAME, handler_table
from tfprof.collector.service.server import CollectorServer
from tfprof.collector.service.servicer import CollectorServicer
from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pb_grpc

PROTO = Path(__file__).resolve().parents[2] / "proto/src/tfprof/proto/collector.proto"
RPC = re.compile(
    r"^\s*rpc\s+(\w+)\s*\(\s*(stream\s+)?(\w+)\s*\)\s*returns\s*\(\s*(stream\s+)?(\w+)"
)


def declared() -> dict[str, tuple[bool, bool, str, str]]:
    """Per rpc of the Collector service: (client streaming, server streaming, request
    type, response type), read from collector.proto."""
    text = PROTO.read_text()
    service = text[text.index("service Collector {") :]
    service = service[: service.index("\n}")]
    out = {}
    for line in service.splitlines():
        m = RPC.match(line)
        if m:
            out[m[1]] = (bool(m[2]), bool(m[4]), m[3], m[5])
    return out


def handler(table: grpc.GenericRpcHandler[object, object], method: str) -> object:
    details = SimpleNamespace(method=f"/{SERVICE_NAME}/{method}", invocation_metadata=())
    return table.service(details)  # type: ignore[arg-type]


@pytest.fixture
def table(collector: CollectorServer) -> grpc.GenericRpcHandler[object, object]:
    return collector.servicer.handlers()


def test_the_proto_declares_what_the_stubs_were_made_from() -> None:
    rpcs = declared()
    assert "Stream" in rpcs and "LiveFigures" in rpcs and "Export" in rpcs
    names = [m.name for m in pb.DESCRIPTOR.services_by_name["Collector"].methods]
    assert names == list(rpcs)  # stale stubs: scripts/gen_proto.sh (test_proto_generated)


def test_every_declared_method_has_a_handler_of_its_kind(
    table: grpc.GenericRpcHandler[object, object],
) -> None:
    for name, (client_streams, server_streams, request, response) in declared().items():
        found = handler(table, name)
        assert found is not None, f"{name} would answer UNIMPLEMENTED"
        assert found.request_streaming is client_streams, name  # type: ignore[attr-defined]
        assert found.response_streaming is server_streams, name  # type: ignore[attr-defined]
        serializer = found.response_serializer  # type: ignore[attr-defined]
        assert serializer is getattr(pb, response).SerializeToString, name
        if name != "Stream":  # Stream's messages stay bytes until the storage pool
            parsed = found.request_deserializer(getattr(pb, request)().SerializeToString())  # type: ignore[attr-defined]
            assert type(parsed).__name__ == request, name


def test_nothing_undeclared_is_answered(table: grpc.GenericRpcHandler[object, object]) -> None:
    assert handler(table, "NoSuchMethod") is None
    servicer_rpcs = {n for n in dir(CollectorServicer) if n[:1].isupper()}
    assert servicer_rpcs == set(declared()), "a servicer method no rpc reaches, or the reverse"


def test_a_servicer_missing_a_method_stops_the_table() -> None:
    class Partial:
        async def Stream(self) -> None: ...

    with pytest.raises(AttributeError, match="Clock"):
        handler_table(Partial(), 1 << 20)


def test_every_unary_method_answers_on_a_real_server(
    collector: CollectorServer, stub: pb_grpc.CollectorStub
) -> None:
    assert stub.Clock(pb.ClockRequest(t1_ns=5), timeout=10).t1_ns == 5
    assert list(stub.ListCaptures(pb.ListCapturesRequest(), timeout=10).captures) == []
    assert list(stub.LiveFigures(pb.LiveFiguresRequest(), timeout=10).jobs) == []
    with pytest.raises(grpc.RpcError) as refused:
        stub.StartCapture(pb.CaptureRequest(all=True, duration_ns=10**9), timeout=10)
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND  # no live stream: not UNIMPLEMENTED
    with pytest.raises(grpc.RpcError) as empty:
        list(stub.Export(pb.ExportRequest(format="chrome"), timeout=60))
    assert empty.value.code() == grpc.StatusCode.NOT_FOUND  # no jobs stored yet


def test_a_request_protobuf_cannot_parse_is_invalid_argument(collector: CollectorServer) -> None:
    with grpc.insecure_channel(collector.address) as channel:
        call = channel.unary_unary(f"/{SERVICE_NAME}/LiveFigures", None, None)
        with pytest.raises(grpc.RpcError) as bad:
            call(b"\xff\xff\xff", timeout=10)
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed LiveFiguresRequest" in (bad.value.details() or "")
