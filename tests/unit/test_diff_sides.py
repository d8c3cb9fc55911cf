"""``diff``'s sides and steps on real traces: a file and the same file stored give the
same rows; ``JOB``, ``JOB/RUN`` and ``capture:ID`` in a data dir; the step rules and
``--steps``; the errors a user meets."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from tests.traces import shared_traces
from tfprof.collector.cli import main
from tfprof.collector.compare.diff_steps import Steps, parse_numbers, select_steps
from tfprof.collector.errors import InvalidArgument, NotFound
from tfprof.collector.store import Store
from tfprof.collector.store.capture_log import CaptureLog
from tfprof.collector.store.importer import import_files
from tfprof.proto import collector_pb2 as pb

PAIR = "hta-trace-diff/trace_diff"
TIMELINES = "tf-timeline-ikhlestov"


def run_json(tmp_path: Path, *argv: str) -> dict[str, Any]:
    out = tmp_path / "out.json"
    assert main(["diff", *argv, "--format", "json", "-o", str(out)]) == 0
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """HTA's control and test traces imported as jobs control and test (one run each),
    and control a second time as job again (two runs)."""
    root = shared_traces() / PAIR
    data = tmp_path_factory.mktemp("diff-data")
    store = Store(data)
    runs = {}
    for job in ("control", "test"):
        runs[job], _ = import_files(store, [root / job / f"{job}.json.gz"], job)
    for n in (1, 2):
        runs[f"again{n}"], _ = import_files(store, [root / "control/control.json.gz"], "again")
    return data, runs


def test_a_file_and_its_stored_run_give_the_same_rows(
    stored: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    data, runs = stored
    root = shared_traces() / PAIR
    files = run_json(tmp_path, str(root / "control/control.json.gz"),
                     str(root / "test/test.json.gz"), "--steps", "first")  # fmt: skip
    jobs = run_json(tmp_path, "--data-dir", str(data), "control", f"test/{runs['test']}",
                    "--steps", "first")  # fmt: skip
    assert files["rows"] == jobs["rows"] and len(files["rows"]) > 400
    assert jobs["sides"][0]["run"] == runs["control"]
    assert [s["steps"] for s in jobs["sides"]] == [[1009], [1009]]
    # A stored run against a file: one data dir for one side.
    mixed = run_json(tmp_path, "--base-data-dir", str(data), "control",
                     str(root / "test/test.json.gz"), "--steps", "first")  # fmt: skip
    assert mixed["rows"] == files["rows"]


def test_the_same_run_on_both_sides_changes_nothing(
    stored: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    data, runs = stored
    doc = run_json(tmp_path, "--data-dir", str(data), f"again/{runs['again1']}",
                   f"again/{runs['again2']}")  # fmt: skip
    rows = doc["rows"]
    assert {r["kind"] for r in rows} == {"kernel", "copy", "api", "op", "collective", "phase"}
    assert all(r["change"] == "=" and r["delta_per_step_us"] == 0 for r in rows)
    assert all(r["delta_pct"] == 0 for r in rows if r["base_per_step_us"])


def test_a_capture_reads_its_processes_in_its_window(
    stored: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    data, runs = stored
    whole = run_json(tmp_path, "--data-dir", str(data), "control", "test", "--kind", "op",
                     "--show-name-regex", "^ProfilerStep#")  # fmt: skip
    starts = {}
    for row in whole["rows"]:
        number = int(row["name"].split("#")[1])
        starts[number] = row["base_total_us"]  # one range per step: its length
    side = whole["sides"][0]
    # A window from the base side's first step over two steps' lengths and 20 µs: step
    # 1010 starts inside it, 1011 after it (steps are 38-61 µs apart in this trace).
    length_ns = int((starts[1009] + starts[1010]) * 1000) + 20_000
    CaptureLog(data, fsync=False).append(pb.Capture(
        capture_id="c-1", start_ns=side["start_ns"], duration_ns=length_ns,
        streams=[pb.CaptureStream(job="control", host="imported", task="3",
                                  run_id=runs["control"])],
    ))  # fmt: skip
    doc = run_json(tmp_path, "--data-dir", str(data), "capture:c-1", "control")
    read = doc["sides"][0]
    assert read["run"] == runs["control"] and read["steps"] == [1009, 1010]
    assert doc["sides"][1]["steps"] == [1009, 1010, 1011, 1012, 1013, 1014]
    assert "capture c-1 (job control run" in doc["notes"][0]


def test_without_steps_the_whole_run_is_one_step(tmp_path: Path) -> None:
    root = shared_traces() / TIMELINES
    doc = run_json(tmp_path, str(root / "GPU_timeline_02_step_0.json"),
                   str(root / "GPU_timeline_02_step_1.json"))  # fmt: skip
    assert [s["steps_source"] for s in doc["sides"]] == ["whole run"] * 2
    assert [s["steps"] for s in doc["sides"]] == [[0], [0]]
    whole = "whole run (no STEP records, no ProfilerStep ranges, no kernel period) = 1 step"
    assert whole in doc["notes"][0]
    kernels = [r for r in doc["rows"] if r["kind"] == "kernel"]
    assert kernels and all(r["base_per_step_us"] == r["base_total_us"] for r in kernels)


def _summary_steps(path: Path, tmp_path: Path) -> list[dict[str, Any]]:
    out = tmp_path / f"{path.name}.steps.json"
    assert main(["summary", "--view", "steps", str(path), "--select", "step,source,host_us,records",
                 "--format", "json", "-o", str(out)]) == 0  # fmt: skip
    rows: list[dict[str, Any]] = json.loads(out.read_text())["rows"]
    return rows


def test_without_step_marks_the_kernel_period_gives_the_steps_views_steps(
    tmp_path: Path,
) -> None:
    """HTA's pair with its ProfilerStep ranges taken out: neither side has step marks, so
    diff reads the steps the steps view finds from the kernel stream's period, the same
    ones, and its per-step figures are theirs."""
    root = shared_traces() / PAIR
    files = []
    for side in ("control", "test"):
        doc = json.loads(gzip.decompress((root / side / f"{side}.json.gz").read_bytes()))
        marks = [e for e in doc["traceEvents"] if str(e.get("name")).startswith("ProfilerStep#")]
        assert len(marks) == 6
        doc["traceEvents"] = [e for e in doc["traceEvents"] if e not in marks]
        files.append(tmp_path / f"{side}.json.gz")
        files[-1].write_bytes(gzip.compress(json.dumps(doc).encode()))
    views = [_summary_steps(f, tmp_path) for f in files]
    doc = run_json(tmp_path, *map(str, files))
    assert [s["steps_source"] for s in doc["sides"]] == ["kernel periodicity"] * 2
    for side, view, note in zip(doc["sides"], views, doc["notes"], strict=True):
        assert view and {r["source"] for r in view} == {"periodicity"}
        # One process, one GPU: a row of the view is a step.
        assert side["steps"] == [r["step"] for r in view] == list(range(len(view)))
        assert f"steps: kernel periodicity, {len(view)} of {len(view)} read" in note
    rows = {(r["kind"], r["name"]): r for r in doc["rows"]}
    for role, view in zip(("base", "test"), views, strict=True):
        step = rows[("phase", "step")]
        assert step[f"{role}_count"] == len(view)
        assert step[f"{role}_total_us"] == pytest.approx(sum(r["host_us"] for r in view), abs=0.01)
        # Each step's own GPU work (placed by its launch) is what the view counts.
        work = sum(r[f"{role}_count"] for r in doc["rows"] if r["kind"] in ("kernel", "copy"))
        assert work == sum(r["records"] for r in view)
    # --steps picks among the periodic steps: their figures, and only theirs.
    picked = run_json(tmp_path, *map(str, files), "--steps", "1-2", "--kind", "phase")
    assert [s["steps"] for s in picked["sides"]] == [[1, 2], [1, 2]]
    step = next(r for r in picked["rows"] if r["name"] == "step")
    assert step["base_total_us"] == pytest.approx(views[0][1]["host_us"] + views[0][2]["host_us"],
                                                  abs=0.01)  # fmt: skip


def test_steps_selection() -> None:
    base = Steps("ProfilerStep ranges", (4, 5, 6), 1, 1)
    test = Steps("ProfilerStep ranges", (5, 6, 7, 8), 2, 2)
    whole = Steps("whole run", (0,), 1, 1)
    assert select_steps("all", base, test) == ((4, 5, 6), (5, 6, 7, 8))
    assert select_steps("first", base, test) == ((4,), (5,))
    assert select_steps("shared", base, test) == ((5, 6), (5, 6))
    assert select_steps("4-5,8", base, test) == ((4, 5), (5, 8))
    assert select_steps("first", whole, test) == ((0,), (5,))
    assert parse_numbers("3, 7-9") == {3, 7, 8, 9}
    with pytest.raises(InvalidArgument, match="whole run is one step"):
        select_steps("shared", whole, test)
    with pytest.raises(NotFound, match="the test side has none of these steps"):
        select_steps("4", base, test)
    with pytest.raises(NotFound, match="no step number on both sides"):
        select_steps("shared", base, Steps("ProfilerStep ranges", (9,), 1, 1))
    for bad in ("last", "5-3", "1,,2"):
        with pytest.raises(InvalidArgument):
            select_steps(bad, base, test)


def test_what_a_user_gets_wrong(
    stored: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    data, runs = stored
    d = str(data)
    cases = [
        (["nosuch.json.gz", "test.json.gz"], "no such trace file nosuch.json.gz"),
        (["--data-dir", d, "nosuch", "test"], "no such job: nosuch"),
        (["--data-dir", d, "control/nosuch", "test"], f"runs: {runs['control']}"),
        (["--data-dir", d, "again", "test"], "has 2 runs"),
        (["--data-dir", d, "capture:none", "test"], "no capture none"),
        (["--data-dir", d, "control", "test", "--kind", "kernels"], "no kind 'kernels'"),
        (["--data-dir", d, "control", "test", "--steps", "99"], "none of these steps"),
    ]
    for argv, message in cases:
        assert main(["diff", *argv]) != 0, argv
        assert message in capsys.readouterr().err, argv
