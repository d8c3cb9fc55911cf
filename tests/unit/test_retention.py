"""Retention (collector/service/retention.py), job states and summaries (collector/store/)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.unit.store_batches import batch, hello
from tfprof.collector.errors import Conflict
from tfprof.collector.service.retention import Policy, enforce, plan
from tfprof.collector.store import Store, stream_counts
from tfprof.collector.store.catalog import FINISHED, INCOMPLETE, STREAMING, JobInfo
from tfprof.collector.store.files import is_streaming
from tfprof.collector.store.loader import load_stream
from tfprof.collector.store.stream_counts import read_summary
from tfprof.proto import collector_pb2 as pb

DAY = 86_400.0
NOW = 1_800_000_000.0


def age(path: Path, days: float) -> None:
    """Set every file under ``path`` to ``days`` before NOW."""
    t = NOW - days * DAY
    for p in [path, *path.rglob("*")]:
        os.utime(p, (t, t))


def run(store: Store, job: str, run_id: str, records: int = 10, finish: bool = True,
        keep_open: bool = False, days: float = 0.0) -> object:  # fmt: skip
    w = store.open_stream(hello(job, run_id=run_id, stream_id="s1"))
    w.append(batch(1, list(range(1_000, 1_000 + records))))
    if finish:
        w.finish(pb.Goodbye(records_sent=records))
    if keep_open:
        return w
    w.close()
    age(store.jobs_dir / job / run_id, days)
    return None


def info(name: str, state: str, nbytes: int, last_write: float) -> JobInfo:
    return JobInfo(name=name, run_id="r", streams=1, hosts=[], records=0, first_ns=None,
                   last_ns=None, finished=state == FINISHED, dropped=0, state=state,
                   bytes=nbytes, last_write=last_write)  # fmt: skip


def test_plan_by_age_spares_streaming_runs() -> None:
    runs = [
        info("old", FINISHED, 10, NOW - 10 * DAY),
        info("live", STREAMING, 10, NOW - 20 * DAY),
        info("dead", INCOMPLETE, 10, NOW - 9 * DAY),
        info("new", FINISHED, 10, NOW - DAY),
    ]
    doomed, remaining = plan(runs, Policy(retain_days=7), NOW)
    assert [d.run.name for d in doomed] == ["old", "dead"]
    assert remaining == 20


def test_plan_by_size_takes_oldest_finished_first() -> None:
    runs = [info("a", FINISHED, 100, NOW - 3 * DAY), info("b", INCOMPLETE, 100, NOW - 5 * DAY),
            info("c", FINISHED, 100, NOW - 2 * DAY), info("d", FINISHED, 100, NOW - 1 * DAY),
            info("e", STREAMING, 100, NOW - 9 * DAY)]  # fmt: skip
    doomed, remaining = plan(runs, Policy(retain_bytes=250), NOW)
    assert [d.run.name for d in doomed] == ["a", "c", "d"]  # never b (incomplete) nor e
    assert remaining == 200
    doomed, _ = plan(runs, Policy(retain_bytes=450), NOW)
    assert [d.run.name for d in doomed] == ["a"]
    assert plan(runs, Policy(), NOW) == ([], 500)


def test_enforce_deletes_old_runs_and_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = Store(tmp_path)
    run(store, "train", "r-old", days=10)
    run(store, "train", "r-new", days=1)
    run(store, "eval", "r-old", finish=False, days=30)
    live = run(store, "serve", "r-live", finish=False, keep_open=True)
    age(store.jobs_dir / "serve", 40)
    before = store.bytes_stored
    caplog.set_level("INFO", logger="tfprof.collector.service.retention")
    deleted = enforce(store, Policy(retain_days=7), now=NOW)
    assert sorted((d.run.name, d.run.run_id) for d in deleted) == [("eval", "r-old"),
                                                                  ("train", "r-old")]  # fmt: skip
    assert not (store.jobs_dir / "train" / "r-old").exists()
    assert not (store.jobs_dir / "eval").exists()  # its last run went: the job dir too
    assert (store.jobs_dir / "serve" / "r-live").exists()
    assert "deleted job train run r-old (finished, idle 10.0 days)" in caplog.text
    assert store.bytes_stored < before
    live.close()  # type: ignore[attr-defined]


def test_enforce_by_size(tmp_path: Path) -> None:
    store = Store(tmp_path)
    for i, days in enumerate([5, 4, 3, 2]):
        run(store, f"job{i}", "r", records=1000, days=days)
    one = store.list_jobs()[0].bytes
    deleted = enforce(store, Policy(retain_bytes=int(2.5 * one)), now=NOW)
    assert [d.run.name for d in deleted] == ["job0", "job1"]
    assert sorted(i.name for i in store.list_jobs()) == ["job2", "job3"]


def test_a_streaming_run_cannot_be_deleted(tmp_path: Path) -> None:
    store = Store(tmp_path)
    w = run(store, "train", "r", finish=False, keep_open=True)
    with pytest.raises(Conflict, match="streaming"):
        store.delete_run("train", "r")
    w.close()  # type: ignore[attr-defined]
    assert store.delete_run("train", "r") > 0


def test_job_states_tasks_and_time_range(tmp_path: Path) -> None:
    store = Store(tmp_path)
    run(store, "done", "r")
    run(store, "crashed", "r", finish=False)
    live = run(store, "live", "r", finish=False, keep_open=True)
    second = store.open_stream(hello("done", run_id="r", stream_id="s2", task="1", host="node-b"))
    second.append(batch(1, [5_000]))
    second.finish(pb.Goodbye())
    second.close()
    infos = {i.name: i for i in store.list_jobs()}
    assert {k: v.state for k, v in infos.items()} == {
        "done": FINISHED, "crashed": INCOMPLETE, "live": STREAMING}  # fmt: skip
    done = infos["done"]
    assert (done.streams, done.records, done.tasks, done.hosts) == (
        2, 11, ["0", "1"], ["node-a", "node-b"])  # fmt: skip
    assert (done.first_ns, done.last_ns) == (1_000, 5_000 + 100)
    assert done.bytes > 0
    live.close()  # type: ignore[attr-defined]
    after = {i.name: i.state for i in Store(tmp_path).list_jobs()}
    assert after["live"] == INCOMPLETE  # no collector holds it any more


def test_another_store_sees_a_held_stream_as_streaming(tmp_path: Path) -> None:
    store = Store(tmp_path)
    w = store.open_stream(hello())
    d = store.jobs_dir / "train" / "run1" / "s1"
    assert is_streaming(d)
    other = Store(tmp_path)
    with pytest.raises(Conflict, match="held open by another collector"):
        import tfprof.collector.store.writer as writer_module

        writer_module.LOCK_WAIT_S, saved = 0.1, writer_module.LOCK_WAIT_S
        try:
            other.open_stream(hello())
        finally:
            writer_module.LOCK_WAIT_S = saved
    w.close()
    assert not is_streaming(d)


def test_the_summary_covers_a_prefix_and_the_tail_is_parsed(tmp_path: Path) -> None:
    store = Store(tmp_path)
    w = store.open_stream(hello())
    w.append(batch(1, [10, 20]))
    w.close()  # writes summary.json
    d = store.jobs_dir / "train" / "run1" / "s1"
    cached = json.loads((d / "summary.json").read_text())
    assert (cached["records"], cached["last_seq"]) == (2, 1)
    # Appended after the summary was written (as after a crash): read from the tail.
    w = store.open_stream(hello())
    w.append(batch(2, [30]))
    w._log.flush()
    s = read_summary(d)
    assert (s.records, s.last_seq, s.first_start_ns, s.last_end_ns) == (3, 2, 10, 130)
    w.close()
    # A corrupt summary falls back to a full scan.
    (d / "summary.json").write_text("{not json")
    assert read_summary(d).records == 3
    (d / "summary.json").write_text(json.dumps({**cached, "log_bytes": 10**9}))
    assert read_summary(d).records == 3


def test_listing_does_not_parse_what_the_summary_covers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path)
    w = store.open_stream(hello())
    for i in range(1, 51):
        w.append(batch(i, [i]))
    w.close()
    parsed: list[bytes] = []

    def counting(raw: bytes) -> pb.Batch:
        parsed.append(raw)
        return pb.Batch.FromString(raw)

    batch_type = SimpleNamespace(FromString=counting)
    monkeypatch.setattr(stream_counts, "pb", SimpleNamespace(Batch=batch_type))
    (info,) = store.list_jobs()
    assert info.records == 50
    assert parsed == []  # checksums verified, nothing parsed


def test_a_fresh_clock_estimate_moves_later_batches(tmp_path: Path) -> None:
    w = store_writer = Store(tmp_path).open_stream(hello(clock_offset_ns=100))
    w.append(batch(1, [1_000]))
    later = batch(2, [2_000])
    later.clock_updated, later.clock_offset_ns = True, 400
    later.host.time_ns.append(2_500)
    for col in ("cpu_percent", "rss_bytes", "threads", "read_bytes", "write_bytes"):
        getattr(later.host, col).append(0)
    w.append(later)
    store_writer.close()
    s = load_stream(tmp_path / "jobs" / "train" / "run1" / "s1")
    assert s is not None
    assert (s.records["start_ns"] + s.record_shift_ns).tolist() == [1_100, 2_400]
    assert np.array_equal(s.host_samples["time_ns"] + s.host_shift_ns, [2_900])
