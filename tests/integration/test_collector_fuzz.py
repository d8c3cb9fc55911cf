"""Fuzz-style: a live collector takes a few thousand random and mutated messages, answers
each bad call with a precise status, and then still stores and exports a good job."""

from __future__ import annotations

import json
import random
import subprocess
from collections import Counter
from pathlib import Path

import grpc
import pytest

from tests.integration.collector_proc import start_serve
from tests.integration.conftest import clean_env, collector_cmd
from tfprof.core.version import PROTOCOL_VERSION
from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pb_grpc

pytestmark = pytest.mark.timeout(180)
MESSAGES = 4000
# What bad input may get; never UNKNOWN or INTERNAL (a crash in the servicer).
EXPECTED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    # A stream id seen before with another (mutated) secret, and a sequence that jumps.
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.OUT_OF_RANGE,
}


def valid_hello(rng: random.Random) -> pb.AgentMessage:
    return pb.AgentMessage(hello=pb.Hello(
        protocol_version=PROTOCOL_VERSION, stream_secret=b"s" * 32,
        job=f"fuzz{rng.randrange(5)}", run_id="r1",
        stream_id=f"s{rng.randrange(20)}", host="node-f", pid=rng.randrange(1 << 16), task="0",
    ))  # fmt: skip


def valid_batch(rng: random.Random, seq: int) -> pb.AgentMessage:
    n = rng.randrange(1, 50)
    b = pb.Batch(seq=seq, string_base=1, strings=["k"])
    b.records.kind.extend(rng.choice([pb.KERNEL, pb.MEMCPY, pb.MEMSET]) for _ in range(n))
    b.records.start_ns.extend(1_700_000_000_000_000_000 + rng.randrange(10**9) for _ in range(n))
    b.records.duration_ns.extend(rng.randrange(10**6) for _ in range(n))
    b.records.name.extend([1] * n)
    return pb.AgentMessage(batch=b)


def semantic_mutation(rng: random.Random, msg: pb.AgentMessage) -> pb.AgentMessage:
    """A parseable message with one field set to something hostile."""
    m = pb.AgentMessage()
    m.CopyFrom(msg)
    if m.HasField("hello"):
        field, value = rng.choice([
            ("job", "../etc"), ("job", "a/b"), ("job", "x" * 200), ("job", "j\x00"),
            ("run_id", ".."), ("stream_id", ""), ("host", "h\n"), ("protocol_version", 7),
            ("clock_offset_ns", -(1 << 62)), ("task", "t" * 1000),
        ])  # fmt: skip
        setattr(m.hello, field, value)
    else:
        r = m.batch.records
        choice = rng.randrange(6)
        if choice == 0:
            r.start_ns[0] = -rng.randrange(1, 1 << 62)
        elif choice == 1:
            r.start_ns[0] = (1 << 63) - 1
        elif choice == 2:
            r.duration_ns[0] = 10**15
        elif choice == 3:
            r.stream.extend([1, 2, 3])  # ragged
        elif choice == 4:
            r.kind[0] = pb.RecordKind.ValueType(1000)  # no such kind
        else:
            m.batch.seq = 0
    return m


def byte_mutation(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randrange(1, 6)):
        op = rng.randrange(4)
        if op == 0 and buf:
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        elif op == 1 and buf:
            del buf[rng.randrange(len(buf)) :]  # truncate
        elif op == 2:
            buf[rng.randrange(len(buf) + 1) : 0] = rng.randbytes(rng.randrange(1, 8))
        elif buf:
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
    return bytes(buf)


def fuzz_calls(rng: random.Random) -> list[list[bytes]]:
    calls: list[list[bytes]] = []
    total = 0
    while total < MESSAGES:
        hello = valid_hello(rng)
        msgs = [hello] + [valid_batch(rng, i + 1) for i in range(rng.randrange(0, 4))]
        kind = rng.randrange(4)
        if kind == 0:  # pure noise
            payloads = [rng.randbytes(rng.randrange(0, 300)) for _ in range(rng.randrange(1, 4))]
        elif kind == 1:  # flipped, cut and spliced bytes of valid messages
            payloads = [byte_mutation(rng, m.SerializeToString()) for m in msgs]
        elif kind == 2:  # parseable but hostile values
            i = rng.randrange(len(msgs))
            msgs[i] = semantic_mutation(rng, msgs[i])
            payloads = [m.SerializeToString() for m in msgs]
        else:  # out of order: batches or goodbyes first, hellos twice
            rng.shuffle(msgs)
            msgs.append(pb.AgentMessage(goodbye=pb.Goodbye()))
            payloads = [m.SerializeToString() for m in msgs]
        calls.append(payloads)
        total += len(payloads)
    return calls


def test_random_and_mutated_messages_leave_the_collector_working(tmp_path: Path) -> None:
    data = tmp_path / "data"
    serve = start_serve(data, "--max-message-bytes", "64K", "--fsync", "false")
    codes: Counter[grpc.StatusCode] = Counter()
    try:
        rng = random.Random(20240601)
        with grpc.insecure_channel(serve.address) as ch:
            raw = ch.stream_stream("/tfprof.v1.Collector/Stream", None, None)
            for payloads in fuzz_calls(rng):
                try:
                    list(raw(iter(payloads), timeout=10))
                    codes[grpc.StatusCode.OK] += 1
                except grpc.RpcError as exc:
                    codes[exc.code()] += 1
            huge = [valid_hello(rng).SerializeToString(), rng.randbytes(100_000)]
            try:
                list(raw(iter(huge), timeout=10))
            except grpc.RpcError as exc:
                codes[exc.code()] += 1
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

            assert set(codes) <= EXPECTED, codes
            assert codes[grpc.StatusCode.INVALID_ARGUMENT] > 100
            assert serve.healthy()

            # A well-formed job still streams, completely.
            stub = pb_grpc.CollectorStub(ch)
            first = pb.Hello(
                protocol_version=PROTOCOL_VERSION,
                stream_secret=b"s" * 32,
                job="good",
                run_id="r",
                stream_id="g",
                host="node-g",
                task="0",
            )
            good = [pb.AgentMessage(hello=first)]
            good += [valid_batch(random.Random(seq), seq) for seq in range(1, 21)]
            expected = sum(len(m.batch.records.kind) for m in good[1:])
            good.append(pb.AgentMessage(goodbye=pb.Goodbye(records_sent=expected)))
            acks = [a.seq for a in stub.Stream(iter(good), timeout=30)]
            assert acks == list(range(21))
        assert serve.healthy()
    finally:
        assert serve.terminate() == 0, serve.output()
    assert "Traceback" not in serve.output()

    out = tmp_path / "good.json"
    result = subprocess.run(
        collector_cmd("export", "--data-dir", str(data), "--job", "good", "-o", str(out)),
        capture_output=True, text=True, env=clean_env(), timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    trace = json.loads(out.read_text())
    slices = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    kernels_and_sets = sum(
        1 for m in good[1:-1] for k in m.batch.records.kind if k in (1, 3)
    )  # fmt: skip
    copies = sum(1 for m in good[1:-1] for k in m.batch.records.kind if k == 2)
    # Copies appear on their stream and on the GPU's memcpy track.
    assert len(slices) == kernels_and_sets + 2 * copies
