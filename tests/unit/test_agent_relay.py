"""agent/relay/socket_server.py: the frame-to-protobuf step (exact values, all-zero columns left
empty) and the relay server's end of a job."""

from __future__ import annotations

import array
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tfprof.agent.inprocess import frames
from tfprof.agent.relay.process_link import records_proto
from tfprof.agent.relay.socket_server import RelayServer
from tfprof.core.records import COLUMNS, RecordKind, RecordTable
from tfprof.proto import collector_pb2 as pb


def relayed(table: RecordTable) -> pb.Records:
    payload = frames.encode_records_frame(table, 1, [], 0)[frames.HEADER.size :]
    out = pb.Records()
    records_proto(frames.decode_records(payload), out)
    return out


def test_columns_arrive_exactly_and_all_zero_ones_stay_empty() -> None:
    table = RecordTable()
    table.add_kernel(start_ns=2**62, end_ns=2**62 + 5, device=1, stream=7, name=3,
                     correlation=2**32 - 1, grid=(4, 1, 1))  # fmt: skip
    table.add_memcpy(start_ns=10, end_ns=30, device=0, stream=7, nbytes=1 << 40, copy_kind=1)
    out = relayed(table)
    for i, name in enumerate(COLUMNS):
        sent = list(table.columns[i])
        got = list(getattr(out, name))
        assert got == (sent if any(sent) else []), name
    assert [int(k) for k in out.kind] == [RecordKind.KERNEL, RecordKind.MEMCPY]
    assert list(out.block_x) == [] and list(out.sync_type) == []


def test_the_whole_int64_range_survives() -> None:
    extremes = array.array("q", [-(2**63), -1, 2**63 - 1])
    zeros = array.array("q", bytes(8 * len(extremes)))
    out = relayed(RecordTable.from_columns({"start_ns": extremes, "duration_ns": zeros}, 3))
    assert list(out.start_ns) == list(extremes)
    assert list(out.duration_ns) == []


def test_an_empty_frame_adds_nothing() -> None:
    out = relayed(RecordTable())
    assert out.ByteSize() == 0


def test_a_job_that_exits_at_once_is_waited_for_not_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The job's process connects and is gone before the relay's reader thread has
    # started: waiting for the readers must wait for it, never join an unstarted thread.
    starting = threading.Event()

    class SlowStart(threading.Thread):
        def start(self) -> None:
            if self.name == "tfprof-relay-conn":
                starting.set()
                time.sleep(0.3)  # a loaded machine
            super().start()

    monkeypatch.setattr(threading, "Thread", SlowStart)
    with tempfile.TemporaryDirectory(dir="/tmp") as short:
        relay = RelayServer(str(Path(short) / "s.sock"), lambda info: None)
        relay.start()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                client.connect(relay.path)
            assert starting.wait(5.0)
            assert relay.wait_closed(5.0)
        finally:
            relay.close()


def test_closing_twice_is_harmless() -> None:
    # A launcher whose job could not start closes the relay on its way out, whatever
    # was closed before.
    with tempfile.TemporaryDirectory(dir="/tmp") as short:
        relay = RelayServer(str(Path(short) / "s.sock"), lambda info: None)
        relay.start()
        relay.close()
        relay.close()
        assert not Path(relay.path).exists()
