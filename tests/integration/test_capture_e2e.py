"""Capture windows end to end with every real part: a ``tfprof-collector serve`` process,
launchers (``tfprof-agent run``) and a node daemon with jobs started only with
``tfprof-agent env``, ``replay:`` jobs paced at speed 1 (replayed time is the wall clock),
and the ``capture`` / ``captures`` commands.

Stored record times are on each host's clock; adding the stream's record shift puts them
on the collector's clock, where a capture's window is. The daemon's host runs with a
skewed clock (``TFPROF_TEST_CLOCK_SKEW_NS``), so a wrong offset sign or a window left in
the collector's time would put its records seconds away from the window.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.integration.capture_jobs import (
    MS,
    REPEAT,
    S,
    capture,
    finish,
    job_code,
    list_captures,
    wait_for_streams,
)
from tfprof.collector.store import Store

from .conftest import Collector, agent_cmd, clean_env, load_trace_file
from .daemon_proc import Daemon, start_daemon
from .dense_replay import DENSE, widest_gap

pytestmark = pytest.mark.timeout(300)

SKEW_NS = -7 * S  # the daemon's "host" runs 7 s behind the collector


def start_daemon_skewed(collector: Collector, node: Path) -> Daemon:
    """The node daemon of a host whose clock runs ``SKEW_NS`` off the collector's."""
    return start_daemon(collector, node, TFPROF_TEST_CLOCK_SKEW_NS=str(SKEW_NS))


def launcher_job(
    address: str, job: str, capture: str, replay: Path, sentinel: Path, **env: str
) -> subprocess.Popen[str]:
    """A job started through ``tfprof-agent run`` in ``capture`` mode."""
    return subprocess.Popen(
        agent_cmd("run", "--collector", address, "--job", job, "--capture", capture,
                  "--source", f"replay:{replay}", "--replay-speed", "1",
                  "--replay-repeat", REPEAT, "--exit-timeout", "4", "--",
                  sys.executable, "-c", job_code(sentinel)),
        env=clean_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def env_job(
    node: Path, job: str, replay: Path, sentinel: Path, capture: str = "on-demand", **extra: str
) -> subprocess.Popen[str]:
    """A job started with only ``tfprof-agent env``'s exports (``env``'s default capture
    mode is on-demand), relayed by the node daemon, on the daemon's skewed clock."""
    exports = subprocess.run(
        agent_cmd("env", "--socket", str(node / "agent.sock"), "--job", job, "--format", "json",
                  "--capture", capture),
        env=clean_env(), capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    env = clean_env(TFPROF_TEST_CLOCK_SKEW_NS=str(SKEW_NS), **json.loads(exports.stdout))
    env.update(TFPROF_SOURCE=f"replay:{replay}", TFPROF_REPLAY_SPEED="1",
               TFPROF_REPLAY_REPEAT=REPEAT, TFPROF_EXIT_TIMEOUT="4", **extra)  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-c", job_code(sentinel)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def collector_times(data: Path) -> dict[str, np.ndarray]:
    """Every stored record start of every job, on the collector's clock."""
    out: dict[str, np.ndarray] = {}
    for job in Store(data).load_jobs():
        times = [s.records["start_ns"] + s.record_shift_ns for s in job.streams]
        out[job.name] = np.sort(np.concatenate(times)) if times else np.zeros(0, np.int64)
    return out


@pytest.fixture
def node() -> Iterator[Path]:
    """A short folder for the daemon's socket (Unix socket paths are limited to 108 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="tfc-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def stop_all() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_on_demand_jobs_record_only_inside_the_captures_they_match(
    traces: Path,
    collector: Collector,
    node: Path,
    tmp_path: Path,
    stop_all: list[subprocess.Popen[str]],
) -> None:
    replay = traces / DENSE
    gap = widest_gap(str(replay))
    data = collector.data_dir
    sentinel = tmp_path / "stop"
    daemon: Daemon = start_daemon_skewed(collector, node)
    stop_all.append(daemon.proc)
    jobs = {
        "alpha": launcher_job(collector.address, "alpha", "on-demand", replay, sentinel),
        "beta": launcher_job(collector.address, "beta", "on-demand", replay, sentinel),
        "gamma": env_job(node, "gamma", replay, sentinel),
    }
    stop_all.extend(jobs.values())
    wait_for_streams(data, set(jobs))
    time.sleep(1.0)  # armed and idle: nothing may arrive
    assert {name: len(t) for name, t in collector_times(data).items()} == dict.fromkeys(jobs, 0)

    merged = tmp_path / "window.json"
    out, first = capture(collector.address, "--all", "--duration", "2s", "--start-in", "1s",
                         "-o", str(merged), "--data-dir", str(data),
                         "--flush-grace", "3s")  # fmt: skip
    assert "3 stream(s)" in out and all(name in out for name in jobs), out
    times = collector_times(data)
    for name in jobs:
        got = times[name]
        assert len(got), f"{name}: nothing captured"
        outside = int((~first.holds(got)).sum())
        assert outside == 0, f"{name}: {outside} of {len(got)} records outside the window"
        # Replayed time is the wall clock: the first and last records sit near the edges.
        assert got[0] - first.start_ns <= gap + 100 * MS, name
        assert first.end_ns - got[-1] <= gap + 100 * MS, name

    # One timeline of the three jobs, restricted to the window.
    trace = load_trace_file(merged)
    other = trace["otherData"]
    assert other["window_ns"] == [first.start_ns, first.end_ns]
    stored = {job["name"]: job["records"]["total"] for job in other["jobs"]}
    assert stored == {name: len(times[name]) for name in jobs}
    assert all(t["records_outside_window"] == 0 for j in other["jobs"] for t in j["tasks"])
    pseudo = {
        e["args"]["name"].split("/")[1]
        for e in trace["traceEvents"]
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    assert pseudo == {f"job:{name}" for name in jobs}

    # A second capture of one job only: the others stay idle.
    out, second = capture(collector.address, "--job", "beta", "--duration", "1s",
                          "--start-in", "1s")  # fmt: skip
    assert "1 stream(s)" in out and "beta" in out and "alpha" not in out, out
    time.sleep((second.end_ns - time.time_ns()) / 1e9 + 3.0)
    errors = finish(jobs, sentinel)
    assert daemon.stop() == 0, daemon.output()
    times = collector_times(data)
    for name in jobs:
        got = times[name]
        in_second = int(second.holds(got).sum())
        assert int((~(first.holds(got) | second.holds(got))).sum()) == 0, name
        if name == "beta":
            assert in_second > 0, "the job-only capture got nothing"
            assert second.holds(got)[-1] and second.end_ns - got[-1] <= gap + 100 * MS
        else:
            assert in_second == 0, f"{name} recorded in a capture of beta only"
    for name, err in errors.items():
        assert "Traceback" not in err, f"{name}: {err}"

    listing = list_captures(collector.address)
    assert [len(c["streams"]) for c in listing] == [3, 1]
    assert [s["job"] for s in listing[1]["streams"]] == ["beta"]
    assert {s["job"] for s in listing[0]["streams"]} == set(jobs)


def test_periodic_windows_have_the_configured_length_and_period(
    traces: Path,
    collector: Collector,
    node: Path,
    tmp_path: Path,
    stop_all: list[subprocess.Popen[str]],
) -> None:
    """periodic:1s/3s for ~10 s, through a launcher and through the daemon: records
    cluster in 1 s windows starting at multiples of 3 s of each host's clock."""
    on, every = 1 * S, 3 * S
    replay = traces / DENSE
    gap = widest_gap(str(replay))
    sentinel = tmp_path / "stop"
    daemon = start_daemon_skewed(collector, node)
    stop_all.append(daemon.proc)
    jobs = {
        "launched": launcher_job(collector.address, "launched", "periodic:1s/3s", replay, sentinel),
        "relayed": env_job(node, "relayed", replay, sentinel, capture="periodic:1s/3s"),
    }
    stop_all.extend(jobs.values())
    wait_for_streams(collector.data_dir, set(jobs))
    time.sleep(10.0)
    finish(jobs, sentinel)
    assert daemon.stop() == 0, daemon.output()
    for job in Store(collector.data_dir).load_jobs():
        (stream,) = job.streams
        local = np.sort(stream.records["start_ns"])  # the host's clock, as the windows are
        assert len(local), f"{job.name}: nothing captured"
        phase = local % every
        assert int((phase >= on).sum()) == 0, f"{job.name}: records outside the windows"
        windows = np.unique(local // every)
        assert len(windows) >= 2, f"{job.name}: {len(windows)} window(s) in ~10 s"
        for k in windows[1:-1]:  # the replay may start or stop inside the outer ones
            inside = local[local // every == k]
            assert inside[0] - k * every <= gap + 100 * MS, job.name
            assert k * every + on - inside[-1] <= gap + 100 * MS, job.name


def test_processes_that_start_during_a_window_record_the_rest_of_it(
    traces: Path,
    collector: Collector,
    node: Path,
    tmp_path: Path,
    stop_all: list[subprocess.Popen[str]],
) -> None:
    """A window reaches a stream that says hello while it is open (pushed right after
    its hello's acknowledgement), through the daemon (a second rank of the job) and
    through a launcher (a job started after a capture of --all): each records from its
    arrival to the window's end."""
    replay = traces / DENSE
    gap = widest_gap(str(replay))
    sentinel = tmp_path / "stop"
    daemon = start_daemon_skewed(collector, node)
    stop_all.append(daemon.proc)
    early = env_job(node, "ranks", replay, sentinel, RANK="0")
    stop_all.append(early)
    wait_for_streams(collector.data_dir, {"ranks"})
    _, window = capture(collector.address, "--all", "--duration", "6s", "--start-in", "0")
    late = {
        "late-rank": env_job(node, "ranks", replay, sentinel, RANK="1"),
        "late-job": launcher_job(collector.address, "latejob", "on-demand", replay, sentinel),
    }
    stop_all.extend(late.values())
    time.sleep((window.end_ns - time.time_ns()) / 1e9 + 2.0)
    finish({"early": early, **late}, sentinel)
    assert daemon.stop() == 0, daemon.output()
    streams = [s for run in Store(collector.data_dir).load_jobs() for s in run.streams]
    got = {
        "ranks/" + s.task if s.job == "ranks" else s.job: np.sort(
            s.records["start_ns"] + s.record_shift_ns
        )
        for s in streams
    }
    assert sorted(got) == ["latejob", "ranks/0", "ranks/1"]
    for name, times in got.items():
        assert len(times), f"{name}: nothing captured"
        assert bool(window.holds(times).all()), f"{name}: records outside the window"
        assert window.end_ns - times[-1] <= gap + 100 * MS, name
    assert got["ranks/1"][0] > got["ranks/0"][0], "the late rank recorded before it started"
