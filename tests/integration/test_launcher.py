"""The launcher and the hook with real processes: pass-through, workers, failure modes."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.integration.agent_runs import run_agent, traced_pids

from .conftest import agent_cmd, clean_env, load_trace_file, track_counts

WORKERS = textwrap.dedent(
    """
    import multiprocessing as mp, os, sys

    def pid(_):
        return os.getpid()

    if __name__ == "__main__":
        for method in ("fork", "spawn"):
            ctx = mp.get_context(method)
            with ctx.Pool(2) as pool:
                pids = sorted(set(pool.map(pid, range(64), chunksize=1)))
                pool.close()
                pool.join()
            print(method, *pids, flush=True)
        print("main", os.getpid(), flush=True)
    """
)


def start_ready_job(tmp_path: Path, script: str) -> subprocess.Popen[str]:
    """A traced Python job (``-c script``) that has printed its first line, ``ready``."""
    proc = subprocess.Popen(
        agent_cmd("run", "--source", "none", "-o", str(tmp_path / "x.json"), "--",
                  sys.executable, "-c", script),
        env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    return proc


def test_output_and_exit_code_pass_through(tmp_path: Path) -> None:
    script = "import sys; print('to stdout'); print('to stderr', file=sys.stderr); sys.exit(5)"
    out = tmp_path / "t.json"
    run = run_agent(
        tmp_path, "--source", "none", "-o", str(out), "--", sys.executable, "-c", script
    )
    assert run.returncode == 5
    assert run.stdout == "to stdout\n"
    assert "to stderr\n" in run.stderr
    assert out.exists()


def test_fork_and_spawn_workers_are_traced(tmp_path: Path) -> None:
    (tmp_path / "workers.py").write_text(WORKERS)
    out = tmp_path / "w.json.gz"
    run = run_agent(
        tmp_path,
        "--source", "none", "--host-metrics-interval", "50", "-o", str(out),
        "--", sys.executable, "workers.py",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = {
        line.split()[0]: {int(p) for p in line.split()[1:]} for line in run.stdout.splitlines()
    }
    traced = traced_pids(out)
    assert lines["main"] <= traced
    assert lines["fork"] and lines["fork"] <= traced, (lines, traced)
    assert lines["spawn"] and lines["spawn"] <= traced, (lines, traced)


def test_user_sitecustomize_still_runs(tmp_path: Path) -> None:
    user_site = tmp_path / "usersite"
    user_site.mkdir()
    marker = tmp_path / "marker"
    (user_site / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    env = clean_env(PYTHONPATH=str(user_site))
    script = "import sitecustomize, sys; print(sitecustomize.__file__)"
    out = tmp_path / "s.json"
    run = run_agent(
        tmp_path, "--source", "none", "-o", str(out), "--", sys.executable, "-c", script, env=env
    )
    assert run.returncode == 0, run.stderr
    assert marker.read_text() == "ran"
    assert run.stdout.strip() == str(user_site / "sitecustomize.py")
    assert traced_pids(out), "the process was not traced"


def test_grandchildren_through_a_shell_script_are_traced(tmp_path: Path, traces: Path) -> None:
    trace = traces / "kineto-hta" / "simple_add.json.gz"
    script = tmp_path / "job.sh"
    script.write_text(
        f"#!/bin/sh\n{sys.executable} -c 'import os; print(os.getpid())'\n"
        f"{sys.executable} -c 'import os; print(os.getpid())'\n"
    )
    script.chmod(0o755)
    out = tmp_path / "g.json"
    run = run_agent(
        tmp_path, "--source", f"replay:{trace}", "--replay-speed", "max",
        "-o", str(out), "--", str(script),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    pids = {int(p) for p in run.stdout.split()}
    assert pids <= traced_pids(out)
    slices, _ = track_counts(load_trace_file(out))
    gpu_tasks = {name.split("/")[2] for name in slices if "/gpu:" in name}
    assert len(gpu_tasks) == 1, "the replay must run once per job, in one process"


def test_unreachable_collector_does_not_disturb_the_job(tmp_path: Path) -> None:
    script = "import time; time.sleep(0.2); print('job finished')"
    start = time.monotonic()
    run = run_agent(
        tmp_path, "--collector", "127.0.0.1:1", "--source", "none",
        "--", sys.executable, "-c", script, timeout=60,
    )  # fmt: skip
    elapsed = time.monotonic() - start
    assert run.returncode == 0
    assert run.stdout == "job finished\n"
    warnings = [line for line in run.stderr.splitlines() if line.startswith("tfprof:")]
    collector_lines = [w for w in warnings if "127.0.0.1:1" in w]
    assert len(collector_lines) == 1, run.stderr
    assert elapsed < 50  # bounded, not a timing assertion on speed


def test_sigterm_is_forwarded_and_exit_status_kept(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import signal, sys, time
        def on_term(signum, frame):
            print("child got SIGTERM", flush=True)
            sys.exit(7)
        signal.signal(signal.SIGTERM, on_term)
        print("ready", flush=True)
        time.sleep(60)
        """
    )
    proc = start_ready_job(tmp_path, script)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert "child got SIGTERM" in out
    assert proc.returncode == 7


def test_job_killed_by_a_signal_kills_the_launcher_the_same_way(tmp_path: Path) -> None:
    script = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    run = run_agent(tmp_path, "--source", "none", "--", sys.executable, "-c", script)
    assert run.returncode == -signal.SIGKILL


SIGINT_SCRIPT = textwrap.dedent(
    """
    import time
    try:
        print("ready", flush=True)
        time.sleep(60)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        time.sleep(0.5)  # a second SIGINT would interrupt this
        print("clean exit", flush=True)
    """
)


def _read_until(fd: int, needle: bytes, timeout: float) -> bytes:
    data = b""
    deadline = time.monotonic() + timeout
    while needle not in data and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO once the terminal's last writer is gone
                break
            if not chunk:
                break
            data += chunk
    return data


def test_ctrl_c_on_a_terminal_reaches_the_job_once(tmp_path: Path) -> None:
    # A real pseudo-terminal: its driver sends SIGINT to the foreground process group,
    # launcher and job alike; the launcher must not send a second one.
    cmd = agent_cmd("run", "--source", "none", "-o", str(tmp_path / "x.json"), "--",
                    sys.executable, "-c", SIGINT_SCRIPT)  # fmt: skip
    pid, master = pty.fork()
    if pid == 0:  # pragma: no cover - the child execs at once
        os.chdir(tmp_path)
        os.execve(cmd[0], cmd, clean_env())
    try:
        assert b"ready" in _read_until(master, b"ready", 60)
        os.write(master, b"\x03")  # Ctrl-C
        out = _read_until(master, b"trace written", 60)
        assert b"interrupted" in out and b"clean exit" in out, out
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        os.close(master)


def test_sigint_sent_to_the_launcher_alone_is_forwarded(tmp_path: Path) -> None:
    proc = start_ready_job(tmp_path, SIGINT_SCRIPT)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert "interrupted" in out and "clean exit" in out, err
    assert proc.returncode == 0


def test_bad_input_is_one_clear_line(tmp_path: Path) -> None:
    run = run_agent(tmp_path, "--job", "../etc", "--", "true")
    assert run.returncode == 2
    assert "invalid job name" in run.stderr and "Traceback" not in run.stderr
    run = run_agent(tmp_path, "--source", "replay:/nonexistent.json", "--", "true")
    assert run.returncode == 2
    assert "replay trace not found" in run.stderr
    run = run_agent(tmp_path, "--source", "none", "--", "no-such-command-tfprof")
    assert run.returncode == 127
    assert "command not found" in run.stderr


def test_python_dash_S_warns(tmp_path: Path) -> None:
    run = run_agent(tmp_path, "--source", "none", "--", sys.executable, "-S", "-c", "pass")
    assert run.returncode == 0
    assert "python -S" in run.stderr


@pytest.mark.skipif(os.path.exists("/dev/nvidia0"), reason="this machine has a GPU")
def test_cupti_source_without_a_driver_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    run = run_agent(
        tmp_path, "--source", "cupti", "-o", str(out), "--", sys.executable, "-c", "print('ok')"
    )
    assert run.returncode == 0
    assert run.stdout == "ok\n"
    # One notice; the end-of-run summary may say again, indented, why no GPU work shows.
    notices = [x for x in run.stderr.splitlines() if x.startswith("tfprof:") and "CUDA driver" in x]
    assert len(notices) == 1, run.stderr
    assert "Traceback" not in run.stderr


def test_a_process_that_execs_itself_keeps_both_streams(tmp_path: Path, traces: Path) -> None:
    # The same pid says hello twice (before and after exec): neither stream may be lost.
    from tfprof.collector.store import Store

    from .conftest import start_collector

    script = tmp_path / "reexec.py"
    script.write_text(
        "import os, sys, time\n"
        "if len(sys.argv) == 1:\n"
        "    time.sleep(1.0)  # long enough for the first image's hello to go out\n"
        "    os.execv(sys.executable, [sys.executable, __file__, 'again'])\n"
        "print('second image', os.getpid())\n"
    )
    collector = start_collector(tmp_path / "data")
    try:
        run = run_agent(
            tmp_path, "--collector", collector.address, "--job", "reexec", "--source", "none",
            "--spool-dir", str(tmp_path / "spool"), "--", sys.executable, str(script),
        )  # fmt: skip
    finally:
        assert collector.stop() == 0
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("second image")
    (job,) = Store(tmp_path / "data").load_jobs(["reexec"])
    assert len(job.streams) == 2
    assert len({s.pid for s in job.streams}) == 1
    # The image that exec'ed never said goodbye: incomplete, not a made-up clean end.
    assert sorted(s.finished for s in job.streams) == [False, True]


def test_sigusr1_reaches_the_job(tmp_path: Path) -> None:
    # Batch schedulers warn of preemption with SIGUSR1; it must reach the job.
    script = textwrap.dedent(
        """
        import signal, sys, time
        signal.signal(signal.SIGUSR1, lambda *_: (print("preempted", flush=True), sys.exit(9)))
        print("ready", flush=True)
        time.sleep(60)
        """
    )
    proc = start_ready_job(tmp_path, script)
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=60)
    assert "preempted" in out
    assert proc.returncode == 9
