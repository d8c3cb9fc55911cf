"""collector/store/: appending streams to disk and loading them back as columnar jobs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.unit.store_batches import batch, hello
from tfprof.collector.errors import NotFound
from tfprof.collector.jobdata import HOST_COLUMNS
from tfprof.collector.store import Store
from tfprof.collector.store.loader import load_stream
from tfprof.collector.store.writer import StreamWriter
from tfprof.core.names import InvalidName, check_name
from tfprof.core.records import COLUMNS, RecordKind
from tfprof.proto import collector_pb2 as pb


def host_batch(seq: int, times: list[int]) -> pb.Batch:
    b = pb.Batch(seq=seq)
    h = b.host
    h.time_ns.extend(times)
    h.cpu_percent.extend([12.5] * len(times))
    h.rss_bytes.extend([1 << 30] * len(times))
    h.threads.extend([8] * len(times))
    h.read_bytes.extend([10] * len(times))
    h.write_bytes.extend([20] * len(times))
    return b


def test_stream_round_trip(tmp_path: Path) -> None:
    d = tmp_path / "s"
    w = StreamWriter(d, hello(devices=[pb.Device(ordinal=0, uuid="GPU-0", name="A100")]))
    assert w.append(batch(1, [1_000, 2_000], name=1, strings=["gemm"], string_base=1))
    b2 = batch(2, [3_000], name=2, strings=["relu"], string_base=2, dropped=5)
    b2.records.bytes[0] = 4096
    b2.records.grid_x[0] = 64
    b2.devices.append(pb.Device(ordinal=1, uuid="GPU-1", name="H100", sm_count=132))
    assert w.append(b2)
    assert w.append(host_batch(3, [10, 20]))
    stream = load_stream(d)
    assert stream is not None
    assert not stream.finished
    w.finish(pb.Goodbye(records_sent=10, dropped_queue=7, dropped_tracer=1, dropped_relay=2,
                        exit_code=3))  # fmt: skip
    w.close()

    s = load_stream(d)
    assert s is not None
    assert (s.job, s.run_id, s.host, s.pid, s.task) == ("train", "run1", "node-a", 4242, "0")
    assert s.argv == ["python", "train.py"]
    assert s.source == "replay:x.json"
    assert s.strings == ["", "gemm", "relu"]
    assert s.num_records == 3
    assert s.records["start_ns"].tolist() == [1_000, 2_000, 3_000]
    assert s.records["name"].tolist() == [1, 1, 2]
    assert s.records["bytes"].tolist() == [0, 0, 4096]
    assert s.records["grid_x"].tolist() == [0, 0, 64]
    assert s.records["kind"].tolist() == [RecordKind.KERNEL] * 3
    assert set(s.records) == set(COLUMNS)
    assert all(col.dtype == np.int64 for col in s.records.values())
    assert set(s.host_samples) == set(HOST_COLUMNS)
    assert s.host_samples["time_ns"].tolist() == [10, 20]
    assert s.host_samples["cpu_percent"].tolist() == [12.5, 12.5]
    assert s.host_samples["rss_bytes"].tolist() == [1 << 30] * 2
    assert s.devices[0].uuid == "GPU-0"
    assert (s.devices[1].uuid, s.devices[1].name, s.devices[1].sm_count) == ("GPU-1", "H100", 132)
    assert s.finished
    assert s.exit_code == 3
    assert (s.dropped.queue, s.dropped.tracer, s.dropped.relay) == (7, 1, 2)


def test_dropped_queue_is_the_highest_count_seen(tmp_path: Path) -> None:
    w = StreamWriter(tmp_path / "s", hello())
    w.append(batch(1, [1], dropped=9))
    w.finish(pb.Goodbye(dropped_queue=4))
    w.close()
    s = load_stream(tmp_path / "s")
    assert s is not None
    assert s.dropped.queue == 9


def test_clock_shifts_come_from_the_hello(tmp_path: Path) -> None:
    h = hello(clock_offset_ns=1_000, clock_rtt_ns=50,
              clock=pb.ClockSnapshot(realtime_ns=5_000_000, tracer_ns=4_000_000))  # fmt: skip
    StreamWriter(tmp_path / "s", h).close()
    s = load_stream(tmp_path / "s")
    assert s is not None
    assert s.record_shift_ns == 1_000 + 1_000_000
    assert s.host_shift_ns == 1_000
    assert s.clock_rtt_ns == 50


def test_duplicate_sequence_numbers_are_ignored_on_write(tmp_path: Path) -> None:
    w = StreamWriter(tmp_path / "s", hello())
    assert w.append(batch(1, [1]))
    assert w.append(batch(2, [2]))
    assert not w.append(batch(2, [2]))
    assert not w.append(batch(1, [1]))
    assert w.last_seq == 2
    w.close()
    s = load_stream(tmp_path / "s")
    assert s is not None
    assert s.records["start_ns"].tolist() == [1, 2]


def test_reopening_a_stream_restores_its_last_seq(tmp_path: Path) -> None:
    d = tmp_path / "s"
    w = StreamWriter(d, hello())
    w.append(batch(1, [1], strings=["a"]))
    w.append(batch(2, [2]))
    w.close()
    again = StreamWriter(d, hello(host="ignored-on-reopen"))
    assert again.last_seq == 2
    assert not again.append(batch(2, [2]))  # a replay after reconnect
    assert again.append(batch(3, [3]))
    again.close()
    s = load_stream(d)
    assert s is not None
    assert s.records["start_ns"].tolist() == [1, 2, 3]
    assert s.host == "node-a"  # the first hello is kept
    assert s.strings == ["", "a"]


def test_duplicate_entries_in_the_log_are_loaded_once(tmp_path: Path) -> None:
    d = tmp_path / "s"
    w = StreamWriter(d, hello())
    w.append(batch(1, [1]))
    w.close()
    log = d / "batches.log"
    log.write_bytes(log.read_bytes() * 2)
    s = load_stream(d)
    assert s is not None
    assert s.records["start_ns"].tolist() == [1]


@pytest.mark.parametrize("cut", [1, 3, 4, 5, 10])
def test_a_torn_tail_is_ignored(tmp_path: Path, cut: int) -> None:
    d = tmp_path / "s"
    w = StreamWriter(d, hello())
    w.append(batch(1, [1, 2]))
    w.close()
    whole = (d / "batches.log").stat().st_size
    w = StreamWriter(d, hello())
    w.append(batch(2, [3, 4]))
    w.close()
    log = d / "batches.log"
    data = log.read_bytes()
    log.write_bytes(data[: whole + cut])  # the second entry is cut mid-way
    s = load_stream(d)
    assert s is not None
    assert s.records["start_ns"].tolist() == [1, 2]

    # The agent reconnects and resends seq 2: it must land after the last whole entry,
    # not after the torn bytes.
    again = StreamWriter(d, hello())
    assert again.last_seq == 1
    assert again.append(batch(2, [3, 4]))
    again.close()
    s = load_stream(d)
    assert s is not None
    assert s.records["start_ns"].tolist() == [1, 2, 3, 4]


def test_a_directory_without_hello_is_no_stream(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert load_stream(tmp_path / "empty") is None


@pytest.mark.parametrize(
    "name", ["", "..", ".", "../x", "a/b", "a\\b", "/abs", ".hidden", "x\n", "a b", "x" * 65]
)
def test_check_name_rejects_unsafe_names(name: str) -> None:
    with pytest.raises(InvalidName, match="invalid job name"):
        check_name("job name", name)


@pytest.mark.parametrize("name", ["train", "job-1.v2_b", "0", "x" * 64])
def test_check_name_accepts_safe_names(name: str) -> None:
    assert check_name("job name", name) == name


@pytest.mark.parametrize("field", ["job", "run_id", "stream_id"])
def test_open_stream_validates_every_path_component(tmp_path: Path, field: str) -> None:
    store = Store(tmp_path)
    with pytest.raises(InvalidName):
        store.open_stream(hello(**{field: "../escape"}))
    assert not (tmp_path / "escape").exists()
    assert list((tmp_path / "jobs").rglob("*")) == []


def write_stream(store: Store, h: pb.Hello, *batches: pb.Batch, goodbye: bool = True) -> None:
    w = store.open_stream(h)
    for b in batches:
        w.append(b)
    if goodbye:
        w.finish(pb.Goodbye())
    w.close()


def test_load_jobs_by_name_and_not_found(tmp_path: Path) -> None:
    store = Store(tmp_path)
    write_stream(store, hello("train", stream_id="a"), batch(1, [1]))
    write_stream(store, hello("train", stream_id="b", pid=5), batch(1, [2, 3]))
    write_stream(store, hello("eval", stream_id="c"), batch(1, [4]))
    assert store.job_names() == ["eval", "train"]

    (train,) = store.load_jobs(["train"])
    assert train.name == "train"
    assert train.run_id == "run1"
    assert len(train.streams) == 2
    assert train.num_records == 3
    assert {job.name for job in store.load_jobs()} == {"train", "eval"}

    with pytest.raises(NotFound, match="nope"):
        store.load_jobs(["train", "nope"])


def test_list_jobs_counts_and_shifted_time_range(tmp_path: Path) -> None:
    store = Store(tmp_path)
    shifted = hello("train", stream_id="a", host="node-a", clock_offset_ns=1_000_000)
    write_stream(store, shifted, batch(1, [10_000, 20_000]), batch(2, [30_000], dropped=2))
    other = hello("train", stream_id="b", host="node-b")
    write_stream(store, other, batch(1, [5_000]), goodbye=False)
    write_stream(store, hello("idle", stream_id="c"))

    infos = {info.name: info for info in store.list_jobs()}
    train = infos["train"]
    assert (train.run_id, train.streams, train.records) == ("run1", 2, 4)
    assert train.hosts == ["node-a", "node-b"]
    assert train.first_ns == 5_000
    assert train.last_ns == 1_000_000 + 30_000 + 100  # shift + start + duration
    assert not train.finished  # stream b never said goodbye
    assert train.dropped == 2

    idle = infos["idle"]
    assert (idle.streams, idle.records, idle.first_ns, idle.last_ns) == (1, 0, None, None)
    assert idle.finished


def test_empty_columns_load_as_zeros(tmp_path: Path) -> None:
    # The relay leaves all-zero columns empty on the wire (collector.proto, Records).
    b = pb.Batch(seq=1)
    b.records.kind.extend([pb.KERNEL, pb.KERNEL])
    b.records.start_ns.extend([10, 20])
    b.records.duration_ns.extend([5, 5])
    b.records.stream.extend([7, 8])
    w = StreamWriter(tmp_path / "s", hello())
    w.append(b)
    w.close()
    stream = load_stream(tmp_path / "s")
    assert stream is not None
    assert stream.records["stream"].tolist() == [7, 8]
    for col in COLUMNS:
        assert len(stream.records[col]) == 2, col
    assert stream.records["bytes"].tolist() == [0, 0]
    assert stream.records["grid_x"].tolist() == [0, 0]
