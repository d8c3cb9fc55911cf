"""The node daemon with real processes: jobs started only with ``tfprof-agent env``
exports (no launcher), one under a foreign CPython without tfprof, each record stored
once; a daemon stopped or killed mid-job and started again loses nothing uncounted."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.integration.daemon_proc import start_daemon
from tfprof.collector.store import Store
from tfprof.readers import load_trace

from .conftest import agent_cmd, clean_env, collector_cmd, start_collector
from .delivery_replay import TRACE, log_bytes, stored_records

pytestmark = pytest.mark.timeout(300)

PYENV = Path("/root/.pyenv/versions")


@pytest.fixture
def node() -> Iterator[Path]:
    """A short folder for the socket (Unix socket paths are limited to 108 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="tfd-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def traced_job(
    node: Path, job: str, python: str, code: str, replay: Path, repeat: int, speed: str
) -> subprocess.Popen[str]:
    """``python -c code`` started by a POSIX shell with only ``tfprof-agent env``'s
    exports (and a replay source, so records flow without a GPU)."""
    env_cmd = " ".join(
        [*agent_cmd("env"), "--socket", str(node / "agent.sock"), "--job", job,
         "--capture", "always"]
    )  # fmt: skip
    script = (
        f'eval "$({env_cmd})" && export TFPROF_SOURCE=replay:{replay} '
        f"TFPROF_REPLAY_SPEED={speed} TFPROF_REPLAY_REPEAT={repeat} TFPROF_EXIT_TIMEOUT=60 "
        '&& exec "$0" -c "$1"'
    )
    return subprocess.Popen(
        ["sh", "-c", script, python, code],
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def foreign_python(root: Path) -> str | None:
    """A venv without tfprof from another CPython of pyenv, or None."""
    for version in ("3.12.1", "3.10.13", "3.13.0", "3.9.18"):
        python = PYENV / version / "bin" / "python"
        if python.exists():
            target = root / f"venv-{version}"
            subprocess.run(
                [str(python), "-m", "venv", "--without-pip", str(target)], check=True, timeout=120
            )
            venv_python = target / "bin" / "python"
            has = subprocess.run(
                [str(venv_python), "-c", "import tfprof"], env=clean_env(), capture_output=True
            )
            assert has.returncode != 0, "the venv must not see tfprof"
            return str(venv_python)
    return None


def runs_of(data: Path, job: str) -> list[object]:
    return list(Store(data).load_jobs([job]))


def dropped(data: Path, job: str) -> int:
    (run,) = Store(data).load_jobs([job])
    return sum(s.dropped.queue + s.dropped.tracer + s.dropped.relay for s in run.streams)


def test_two_jobs_with_only_the_env_exports_are_stored_exactly_once(
    traces: Path, node: Path, tmp_path: Path
) -> None:
    foreign = foreign_python(tmp_path)
    if foreign is None:
        pytest.skip("no other CPython under /root/.pyenv/versions")
    data = tmp_path / "data"
    collector = start_collector(data)
    daemon = start_daemon(collector, node)
    repeat = 20
    try:
        jobs = {
            "native": traced_job(node, "native", sys.executable, "print('native done')",
                                 traces / TRACE, repeat, "max"),
            "foreign": traced_job(node, "foreign", foreign, "print('foreign done')",
                                  traces / TRACE, repeat, "max"),
        }  # fmt: skip
        for name, proc in jobs.items():
            out, err = proc.communicate(timeout=180)
            assert proc.returncode == 0, err
            assert out == f"{name} done\n"
            assert "tfprof:" not in err, err
        assert daemon.stop() == 0, daemon.output()
    finally:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
        assert collector.stop() == 0
    assert "daemon stopped: 2 stream(s)" in daemon.output(), daemon.output()
    expected = repeat * len(load_trace(traces / TRACE))
    for name in ("native", "foreign"):
        assert len(runs_of(data, name)) == 1
        rows = stored_records(data, name)
        assert len(rows) == expected and len(np.unique(rows, axis=0)) == expected, name
        assert dropped(data, name) == 0
    listing = subprocess.run(collector_cmd("jobs", "--data-dir", str(data)), env=clean_env(),
                             capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    assert listing.stdout.count("finished") == 2, listing.stdout
    assert "incomplete" not in listing.stdout


def test_processes_started_separately_land_in_one_run(
    traces: Path, node: Path, tmp_path: Path
) -> None:
    """Two ranks of one Slurm job, started one by one: one job, one run, two tasks."""
    data = tmp_path / "data"
    collector = start_collector(data)
    daemon = start_daemon(collector, node)
    try:
        procs = []
        for rank in ("0", "1"):
            env_out = subprocess.run(
                [*agent_cmd("env", "--socket", str(node / "agent.sock"), "--format", "json")],
                env=clean_env(), capture_output=True, text=True, timeout=60, check=True,
            )  # fmt: skip
            env = clean_env(**json.loads(env_out.stdout))
            env.update(SLURM_JOB_ID="4242", SLURM_JOB_NAME="llm", SLURM_PROCID=rank)
            rank_proc = subprocess.Popen(
                [sys.executable, "-c", "print('rank done')"], env=env, text=True,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )  # fmt: skip
            procs.append(rank_proc)
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0 and out == "rank done\n", err
        assert daemon.stop() == 0
    finally:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
        assert collector.stop() == 0
    (run,) = Store(data).load_jobs(["llm-4242"])
    assert sorted(s.task for s in run.streams) == ["0", "1"]


def _kill_restart(
    traces: Path, node: Path, tmp_path: Path, sig: int, freeze_collector: bool = False
) -> tuple[int, int, str, str]:
    """A job replaying for a few seconds; the daemon stopped with ``sig`` once records
    were stored, and started again. ``freeze_collector``: the collector is stopped
    (SIGSTOP) for the daemon's stop, so the daemon holds batches it cannot deliver.
    (stored, counted as dropped, the job's stderr, what the first daemon said)."""
    data = tmp_path / "data"
    collector = start_collector(data)
    # A frozen collector never answers: the first daemon spools after 2 s, not 10.
    daemon = start_daemon(collector, node, **({"TFPROF_DELIVERY_TIMEOUT": "2"}
                                              if freeze_collector else {}))  # fmt: skip
    repeat = 40
    frozen = False
    try:
        job = traced_job(node, "restarted", sys.executable,
                         "import time; time.sleep(9); print('job done')",
                         traces / TRACE, repeat, "8")  # fmt: skip
        deadline = time.monotonic() + 60
        while log_bytes(data) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert log_bytes(data) > 0, "nothing stored before the stop"
        if freeze_collector:
            collector.proc.send_signal(signal.SIGSTOP)
            frozen = True
            time.sleep(1.0)  # the job goes on: the daemon reads batches it cannot deliver
        daemon.stop(sig)
        first = daemon.output()
        if frozen:
            collector.proc.send_signal(signal.SIGCONT)
            frozen = False
        time.sleep(0.5)
        daemon = start_daemon(collector, node)
        out, err = job.communicate(timeout=180)
        assert job.returncode == 0 and out == "job done\n", err
        if "wait in" in first:  # the next daemon delivers what the first one spooled
            assert daemon.wait_for("spooled records of earlier runs"), daemon.output()
        assert daemon.stop() == 0, daemon.output()
    finally:
        if frozen:
            collector.proc.send_signal(signal.SIGCONT)
        if daemon.proc.poll() is None:
            daemon.proc.kill()
        if job.poll() is None:
            job.kill()
        assert collector.stop() == 0
    rows = stored_records(data, "restarted")
    assert len(np.unique(rows, axis=0)) == len(rows), "duplicated records"
    assert len(runs_of(data, "restarted")) == 1
    (run,) = Store(data).load_jobs(["restarted"])
    assert len(run.streams) == 2, "one stream per connection"
    return len(rows), dropped(data, "restarted"), err, first


def jobs_listing(data: Path) -> str:
    listing = subprocess.run(collector_cmd("jobs", "--data-dir", str(data)), env=clean_env(),
                             capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    return listing.stdout


def test_a_daemon_stopped_and_restarted_mid_job_loses_nothing_uncounted(
    traces: Path, node: Path, tmp_path: Path
) -> None:
    stored, lost, err, first = _kill_restart(traces, node, tmp_path, signal.SIGTERM)
    assert "lost the connection to the tfprof daemon" in err
    assert stored + lost == 40 * len(load_trace(traces / TRACE)), (stored, lost, err, first)
    assert lost == 0, "the frame a stop cut short goes again on the next connection"
    # The stopped daemon ended the process's stream with a goodbye: the run is whole.
    assert "daemon stopped: 1 stream(s)" in first, first
    listing = jobs_listing(tmp_path / "data")
    assert "finished" in listing and "incomplete" not in listing, listing


def test_a_daemon_stopped_while_the_collector_stalls_spools_what_it_read(
    traces: Path, node: Path, tmp_path: Path
) -> None:
    # The stop comes while the daemon holds batches the collector has not acknowledged
    # (it is frozen): they go to the spool with the stream's goodbye, and the next daemon
    # delivers them. Before, the stream was never finished and they died with the daemon.
    stored, lost, err, first = _kill_restart(
        traces, node, tmp_path, signal.SIGTERM, freeze_collector=True
    )
    assert "daemon stopped: 1 stream(s)" in first and "wait in" in first, first
    assert stored + lost == 40 * len(load_trace(traces / TRACE)), (stored, lost, err, first)
    assert lost == 0
    listing = jobs_listing(tmp_path / "data")
    assert "finished" in listing and "incomplete" not in listing, listing


def test_a_daemon_killed_mid_job_and_restarted_keeps_the_job_traced(
    traces: Path, node: Path, tmp_path: Path
) -> None:
    stored, lost, err, _ = _kill_restart(traces, node, tmp_path, signal.SIGKILL)
    assert "lost the connection to the tfprof daemon" in err
    produced = 40 * len(load_trace(traces / TRACE))
    # Nothing counted twice; what the killed daemon held unacknowledged is the only gap
    # (at most its in-flight window), and the run says a stream lost its agent.
    assert stored + lost <= produced
    assert stored + lost >= produced * 0.5, (stored, lost)
    assert "agent lost: no goodbye from 1 stream(s)" in jobs_listing(tmp_path / "data")
