"""Capture by steps end to end: a real ``tfprof-collector serve``, ``tfprof-agent run`` in
on-demand mode, and ``tfprof-collector capture --steps N [--skip-steps K] -o``.

- Ranks replaying a real multi-GPU trace with ``ProfilerStep#N`` ranges (at speed 1, so
  replayed time is the wall clock), one of them started a second after the others:
  every rank records the same N whole steps, and nothing outside them.
- Real training jobs with the zero-code step markers: a Keras ``fit`` (TensorFlow CPU)
  and a PyTorch CPU loop (when torch is installed) record N steps, numbered in a row,
  while a replay of a real GPU trace without steps supplies the GPU records.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tfprof.collector.jobdata import StreamData
from tfprof.collector.store import Store
from tfprof.core.records import RecordKind
from tfprof.readers import load_trace

from .capture_jobs import finish, list_captures, wait_for_streams
from .conftest import EXAMPLE, Collector, agent_cmd, clean_env, collector_cmd, load_trace_file

pytestmark = pytest.mark.timeout(420)

OF2 = "kineto-hta-dist/nccl_allreduce_rank0_of2.json.gz"
# No step ranges, and a record start at least every 19 ms when looped: any step of the
# jobs below holds some of its GPU records.
NO_STEPS = "kineto-hta/event_sync_multi_stream.json.gz"
PROFILER_STEP = re.compile(r"ProfilerStep#(\d+)")


def capture_steps(collector: Collector, job: str, out: Path, *args: str) -> str:
    done = subprocess.run(
        collector_cmd("capture", "--collector", collector.address, "--job", job, *args,
                      "-o", str(out), "--data-dir", str(collector.data_dir),
                      "--flush-grace", "2s"),
        env=clean_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def step_markers(
    stream_strings: list[str], records: dict[str, np.ndarray], shift: int
) -> list[tuple[str, int]]:
    """(name, start on the collector's clock) of the host ``ProfilerStep#N`` ranges, in
    time order (a loop's last step comes before the next loop's first)."""
    kinds, names, threads = records["kind"], records["name"], records["thread"]
    return sorted(
        (
            (stream_strings[n], int(s) + shift)
            for k, n, t, s in zip(kinds, names, threads, records["start_ns"], strict=True)
            if k == RecordKind.MARKER and t and PROFILER_STEP.fullmatch(stream_strings[n])
        ),
        key=lambda step: step[1],
    )


def next_boundary(trace_path: Path, name: str, start: int) -> int:
    """When the replayed step after ``name`` (which started at ``start``) starts: the
    next ProfilerStep of the trace, or the first one of the next loop."""
    from tfprof.agent.inprocess.sources.replay_plan import LOOP_GAP_NS

    trace = load_trace(trace_path)
    offsets = {
        trace.names[n]: s
        for k, n, t, s in zip(trace.column("kind"), trace.column("name"),
                              trace.column("thread"), trace.column("start_ns"), strict=True)
        if k == RecordKind.MARKER and t and PROFILER_STEP.fullmatch(trace.names[n])
    }  # fmt: skip
    order = sorted(offsets, key=offsets.__getitem__)
    at = order.index(name)
    if at + 1 < len(order):
        return start + offsets[order[at + 1]] - offsets[name]
    return start + trace.span_ns + LOOP_GAP_NS - offsets[name] + offsets[order[0]]


def test_replayed_ranks_record_the_same_whole_steps(
    traces: Path, collector: Collector, tmp_path: Path
) -> None:
    replay = traces / OF2
    sentinel = tmp_path / "stop"
    wait = f"import os, time\nwhile not os.path.exists({str(sentinel)!r}): time.sleep(0.05)"
    # Ranks 0 and 1 at once, rank 2 a second later: the replay origin is the run's.
    script = 'RANK=0 "$PY" -c "$CODE" & RANK=1 "$PY" -c "$CODE" & sleep 1; RANK=2 "$PY" -c "$CODE"'
    script += "; wait"
    job = subprocess.Popen(
        agent_cmd("run", "--collector", collector.address, "--job", "ddp", "--capture",
                  "on-demand", "--source", f"replay:{replay}", "--replay-speed", "1",
                  "--replay-repeat", "60", "--exit-timeout", "4", "--", "bash", "-c", script),
        env=clean_env(PY=sys.executable, CODE=wait), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for_streams(collector.data_dir, {"ddp"})
        deadline = time.monotonic() + 60
        while len(Store(collector.data_dir).load_jobs(["ddp"])[0].streams) < 3:
            assert time.monotonic() < deadline, "not every rank said hello"
            time.sleep(0.2)
        merged = tmp_path / "steps.json"
        out = capture_steps(collector, "ddp", merged, "--steps", "2", "--skip-steps", "1")
        assert "3 stream(s)" in out and "2 step(s), skipping 1," in out, out
    finally:
        errors = finish({"ddp": job}, sentinel)
    assert "Traceback" not in errors["ddp"]

    (stored,) = Store(collector.data_dir).load_jobs(["ddp"])
    steps = {s.task: step_markers(s.strings, s.records, s.record_shift_ns) for s in stored.streams}
    assert sorted(steps) == ["0", "1", "2"]
    # Two whole steps each, the same ones (names and starts to the nanosecond).
    assert len(steps["0"]) == 2 and steps["0"] == steps["1"] == steps["2"], steps
    (_, first), (last_name, last) = steps["0"]
    close = next_boundary(replay, last_name, last)
    for s in stored.streams:
        starts = s.records["start_ns"] + s.record_shift_ns
        assert starts.min() == first, s.task  # nothing before the first step's start
        assert starts.max() < close, s.task  # nothing from the step after the last one
        assert (s.records["kind"] == RecordKind.KERNEL).sum() > 100, s.task
    # The capture's merged timeline holds every rank; the listing says it was by steps.
    trace = load_trace_file(merged)
    tasks = {t["task"] for j in trace["otherData"]["jobs"] for t in j["tasks"]}
    assert tasks == {"0", "1", "2"}
    (listed,) = list_captures(collector.address)
    assert (listed["steps"], listed["skip_steps"]) == (2, 1)


def zero_code_job(collector: Collector, job: str, traces: Path, *cmd: str) -> subprocess.Popen[str]:
    """A training job in on-demand mode, a replay of a real GPU trace without steps as
    its tracer source (this machine has no GPU)."""
    return subprocess.Popen(
        agent_cmd("run", "--collector", collector.address, "--job", job, "--capture",
                  "on-demand", "--source", f"replay:{traces / NO_STEPS}", "--replay-speed", "1",
                  "--replay-repeat", "20000", "--exit-timeout", "4", "--", *cmd),
        env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def step_starts(stream: StreamData) -> np.ndarray:
    """The starts of the stream's STEP records on the collector's clock, sorted."""
    steps = stream.records["kind"] == RecordKind.STEP
    return np.sort(stream.records["start_ns"][steps] + stream.record_shift_ns)


def check_steps_captured(collector: Collector, job: str, want: int, marker: str) -> list[int]:
    (stored,) = Store(collector.data_dir).load_jobs([job])
    (stream,) = stored.streams
    r = stream.records
    is_step = r["kind"] == RecordKind.STEP
    numbers = sorted(int(n) for n in r["external_id"][is_step])
    assert len(numbers) == want, numbers
    assert numbers == list(range(numbers[0], numbers[0] + want))  # in a row
    assert {stream.strings[n] for n in r["name"][is_step]} == {marker}
    starts = step_starts(stream)
    ends = (r["start_ns"] + r["duration_ns"])[is_step] + stream.record_shift_ns
    gpu = r["start_ns"][~is_step] + stream.record_shift_ns
    assert len(gpu) > 0, "no replayed GPU record in the steps"
    assert gpu.min() >= starts[0]  # the window opened at the first step's start
    assert gpu.max() < ends.max() + (ends - starts).max()  # and closed at the next one
    return numbers


def test_keras_fit_steps_are_captured_with_no_code_change(
    traces: Path, collector: Collector, tmp_path: Path
) -> None:
    job = zero_code_job(collector, "keras-fit", traces,
                        sys.executable, str(EXAMPLE), "--fit", "--steps", "800")  # fmt: skip
    try:
        wait_for_streams(collector.data_dir, {"keras-fit"})
        out = capture_steps(collector, "keras-fit", tmp_path / "fit.json", "--steps", "4",
                            "--skip-steps", "2")  # fmt: skip
        assert "1 stream(s)" in out, out
    finally:
        _, err = job.communicate(timeout=300)
    assert job.returncode == 0, err
    numbers = check_steps_captured(collector, "keras-fit", 4, "keras")
    assert numbers[0] >= 2  # opened at the third boundary after the request (2 skipped)


TORCH_LOOP = """
import time, torch
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 16), torch.randn(64, 1)
for _ in range(250):
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    time.sleep(0.05)
"""


def test_pytorch_optimizer_steps_are_captured_with_no_code_change(
    traces: Path, collector: Collector, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    job = zero_code_job(collector, "torch-loop", traces, sys.executable, "-c", TORCH_LOOP)
    try:
        wait_for_streams(collector.data_dir, {"torch-loop"})
        capture_steps(collector, "torch-loop", tmp_path / "loop.json", "--steps", "3")
    finally:
        _, err = job.communicate(timeout=300)
    assert job.returncode == 0, err
    check_steps_captured(collector, "torch-loop", 3, "torch.optim")
