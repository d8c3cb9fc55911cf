"""Imports (every format tfprof reads) into the store and straight into merges:
round trips through each export, the shared real traces, placement in time, errors."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.traces import TRACES, needs_traces
from tests.unit.recorded_files import KINETO_FILES, TF_FILES
from tests.unit.sample_timeline import T0, sample_timeline
from tfprof.collector.cli import main
from tfprof.collector.errors import InvalidArgument, NotFound
from tfprof.collector.export import write_timeline
from tfprof.collector.merged.whole import WholeTimeline as Timeline
from tfprof.collector.merged.whole import build_timeline
from tfprof.collector.store import Store
from tfprof.collector.store.importer import import_files, jobs_from_files
from tfprof.collector.timespec import parse_duration, parse_window
from tfprof.readers import load_trace, read_trace

pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")

Event = tuple[str, int, int, str]  # (name, start relative ns, duration ns, track)


def events(tl: Timeline, memcpy_tracks: bool = False) -> Counter[Event]:
    out: Counter[Event] = Counter()
    for track in tl.slices:
        if track.name.endswith("/memcpy") and not memcpy_tracks:
            continue
        suffix = track.name.split("/gpu:", 1)[1]  # job and task labels may differ
        for name_id, start, dur in zip(
            track.name_id.tolist(), track.start_ns.tolist(), track.duration_ns.tolist(), strict=True
        ):
            out[(tl.names[name_id], start, dur, suffix)] += 1
    return out


@pytest.mark.parametrize("suffix", [".json.gz", ".pftrace"])
def test_export_import_export_keeps_every_event(tmp_path: Path, suffix: str) -> None:
    first = sample_timeline()
    exported = write_timeline(first, tmp_path / f"a{suffix}")
    store = Store(tmp_path / "data")
    import_files(store, [exported], "again", shift="none")
    second = build_timeline(store.load_jobs(["again"]))
    want = events(first)
    want = Counter({k: v for k, v in want.items() if k[0] != "unknown activity"})
    assert events(second) == want
    assert second.origin_ns == first.origin_ns  # the file's own clock is kept
    # and through a second export, into the other format, unchanged again
    again = write_timeline(second, tmp_path / "b.pftrace")
    third = build_timeline(jobs_from_files([again], as_steps=True, shift="none"))
    assert events(third) == want
    cols: dict[str, list[int]] = {
        c: [] for c in ("grid_x", "registers", "bytes", "copy_kind", "src_kind", "correlation")
    }
    for track in third.slices:
        for c in cols:
            cols[c] += track.column(c).tolist()
    assert sorted(cols["registers"]) == sorted([40, 0, 0, 0, 0, 0, 0])
    assert 1_000_000 in cols["bytes"] and 10 in cols["copy_kind"]


def test_stepstats_round_trip_keeps_names_durations_streams(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard.compat.proto.config_pb2")
    first = sample_timeline()
    for name in ("run.pb", "run.pbtxt"):
        out = write_timeline(first, tmp_path / name)
        second = build_timeline(jobs_from_files([out], as_steps=True, shift="none"))
        # StepStats has no record kinds: the unknown-kind record comes back as a kernel
        assert events(second) == events(first)
        assert second.origin_ns == first.origin_ns


def test_kernel_names_with_colons_survive_stepstats(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard.compat.proto.config_pb2")
    from tests.unit.merge_rows import records
    from tfprof.collector.jobdata import JobData, StreamData
    from tfprof.core.records import RecordKind

    name = "void at::native::kernel<float>(int)"
    rows = [{"kind": RecordKind.KERNEL, "start_ns": T0, "duration_ns": 5, "stream": 3, "name": 1}]
    stream = StreamData("j", "r", "h", 1, "0", strings=["", name], records=records(rows))
    out = write_timeline(build_timeline([JobData("j", "r", [stream])]), tmp_path / "k.pbtxt")
    assert read_trace(out).names[1:] == [name]


@needs_traces
@pytest.mark.parametrize("name", TF_FILES + KINETO_FILES)
def test_every_shared_trace_imports_with_per_stream_counts(tmp_path: Path, name: str) -> None:
    assert TRACES is not None
    path = next(TRACES.rglob(name))
    trace = load_trace(path)
    expected = trace.per_stream_counts()
    store = Store(tmp_path / "data")
    _, records = import_files(store, [path], "imported-job")
    (job,) = store.load_jobs(["imported-job"])
    (stream,) = job.streams
    assert stream.host == "imported" and stream.source == f"import:{path}"
    got: dict[tuple[int, int], Counter[str]] = {}
    labels = {1: "kernel", 2: "memcpy", 3: "memset", 4: "sync"}
    for kind, device, st in zip(
        stream.records["kind"].tolist(),
        stream.records["device"].tolist(),
        stream.records["stream"].tolist(),
        strict=True,
    ):
        if kind in labels:  # GPU activity; host records are counted below
            got.setdefault((device, st), Counter())[labels[kind]] += 1
    assert {k: {c: n for c, n in v.items() if n} for k, v in expected.items()} == {
        k: dict(v) for k, v in got.items()
    }
    assert records == len(trace) == stream.num_records
    # the file's clock is kept: the first record is where the file put it
    assert stream.record_shift_ns == load_trace(path).origin_ns


@needs_traces
def test_merge_steps_one_after_another_like_the_hand_made_file(tmp_path: Path) -> None:
    assert TRACES is not None
    steps = [TRACES / "tf-timeline-ikhlestov" / f"GPU_timeline_02_step_{i}.json" for i in range(3)]
    out = tmp_path / "merged.json"
    assert main(["merge", *map(str, steps), "-o", str(out)]) == 0
    merged = load_trace(out)

    def gpu_records(path: Path) -> int:
        return sum(sum(c.values()) for c in load_trace(path).per_stream_counts().values())

    # Every record comes back, the op ranges of the host side included.
    assert len(merged) == sum(len(load_trace(p)) for p in steps)
    assert gpu_records(out) == sum(gpu_records(p) for p in steps)
    # recorded one after another on one clock: kept as recorded, on shared tracks
    jobs = jobs_from_files(steps, as_steps=True)
    assert len(jobs) == 1 and {s.task for s in jobs[0].streams} == {"0"}
    tl = build_timeline(jobs)
    assert len({t.name for t in tl.slices}) == len(tl.slices)
    starts = [s.record_shift_ns for s in jobs[0].streams]
    assert starts == [load_trace(p).origin_ns for p in steps]
    # the same step three times overlaps itself: placed consecutively instead
    same = jobs_from_files([steps[1]] * 3, as_steps=True)[0].streams
    span = load_trace(steps[1]).span_ns
    assert [s.record_shift_ns - same[0].record_shift_ns for s in same] == [0, span, 2 * span]


@needs_traces
def test_merge_jobs_side_by_side(tmp_path: Path) -> None:
    assert TRACES is not None
    files = [TRACES / "kineto-hta" / f for f in KINETO_FILES]
    jobs = jobs_from_files(files, as_steps=False)
    assert [j.name for j in jobs] == ["event_sync_multi_stream", "simple_add"]
    # recorded years apart: auto aligns their starts
    assert jobs[0].streams[0].record_shift_ns == jobs[1].streams[0].record_shift_ns
    kept = jobs_from_files(files, as_steps=False, shift="none")
    assert [j.streams[0].record_shift_ns for j in kept] == [load_trace(f).origin_ns for f in files]
    moved = jobs_from_files(files, as_steps=False, shift="+2ms")
    assert [j.streams[0].record_shift_ns for j in moved] == [
        load_trace(f).origin_ns + 2_000_000 for f in files
    ]
    out = tmp_path / "jobs.pftrace"
    assert main(["merge", "--as", "jobs", *map(str, files), "-o", str(out)]) == 0
    tl = build_timeline(jobs_from_files([out], as_steps=True))
    assert tl.num_slices > 0


@needs_traces
def test_imported_and_live_jobs_export_together(tmp_path: Path) -> None:
    assert TRACES is not None
    data = tmp_path / "data"
    live = write_timeline(sample_timeline(), tmp_path / "live.json")
    tf = TRACES / "tf-timeline-ikhlestov" / "GPU_timeline_01.json"
    assert main(["import", str(tf), "--job", "old", "--data-dir", str(data)]) == 0
    assert main(["import", str(live), "--job", "new", "--data-dir", str(data)]) == 0
    for out in ("all.json.gz", "all.pftrace", "all.pbtxt", "logdir/"):
        assert main(["export", "--data-dir", str(data), "-o", f"{tmp_path}/{out}"]) == 0
    assert len(list((tmp_path / "logdir").rglob("*.xplane.pb"))) == 1
    tl = build_timeline(Store(data).load_jobs())
    prefixes = {t.key.task_prefix for t in tl.slices}
    assert prefixes == {"/job:old/task:0", "/job:new/task:0"}
    windowed = tmp_path / "w.json"
    assert main(["export", "--data-dir", str(data), "--job", "new", "--window", "0:2us",
                 "-o", str(windowed)]) == 0  # fmt: skip
    assert len(load_trace(windowed)) == 2  # the two kernels that start in the first 2 µs
    # the same file twice in one second is two runs, never one deduplicated run
    assert main(["import", str(tf), "--job", "old", "--data-dir", str(data)]) == 0
    # 9 GPU records and 13 host op ranges each
    assert [j.num_records for j in Store(data).load_jobs(["old"])] == [22, 22]


def test_window_parsing() -> None:
    assert parse_window("2s:3.5s", 100) == (100 + 2 * 10**9, 100 + 3_500_000_000)
    assert parse_window(":800us", 0) == (None, 800_000)
    assert parse_window("150ms:", 0) == (150_000_000, None)
    assert parse_window("@1712867402.25:@1712867403", None) == (
        1_712_867_402_250_000_000,
        1_712_867_403_000_000_000,
    )
    assert parse_window("@5ns:@7ns", None) == (5, 7)
    for bad in ("2s", "1:2:3", "x:1s", "3s:1s"):
        with pytest.raises(InvalidArgument):
            parse_window(bad, 0)
    assert parse_duration("-250ms") == -250_000_000
    with pytest.raises(InvalidArgument, match="not a duration"):
        parse_duration("soon")


def test_bad_inputs_get_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.pftrace"
    junk.write_bytes(b"\x0a\x05abc")
    text = tmp_path / "notes.json"
    text.write_text("hello")
    cases = [
        (["merge", str(tmp_path / "missing.json"), "-o", str(tmp_path / "o.json")], 2),
        (["merge", str(junk), "-o", str(tmp_path / "o.json")], 2),
        (["merge", str(text), "-o", str(tmp_path / "o.json")], 2),
        (["import", str(text), "--job", "bad name", "--data-dir", str(tmp_path / "d")], 2),
        (["merge", str(text), "-o", str(tmp_path / "o.txt")], 2),
    ]
    for argv, code in cases:
        assert main(argv) == code
        err = capsys.readouterr().err.strip()
        assert err.startswith("tfprof-collector: ") and "\n" not in err
    with pytest.raises(NotFound):
        jobs_from_files([tmp_path / "nope.pb"], as_steps=True)
    assert not list(Path(tmp_path).glob("o.*"))
