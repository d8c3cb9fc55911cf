"""A SIGKILLed launcher, with real processes: the job runs on, each traced process
counts what it could not deliver and says so, and the collector lists the run as
incomplete with the reason."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import agent_cmd, clean_env, collector_cmd, start_collector
from .delivery_replay import TRACE, log_bytes

pytestmark = pytest.mark.timeout(180)

JOB = "import time; time.sleep(4); print('job done', flush=True)"


def test_a_killed_launcher_leaves_the_job_running_and_the_loss_counted(
    traces: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    collector = start_collector(data)
    cmd = agent_cmd(
        "run", "--collector", collector.address, "--job", "orphaned",
        "--source", f"replay:{traces / TRACE}", "--replay-speed", "5",
        "--replay-repeat", "1000", "--host-metrics-interval", "0",
        "--spool-dir", str(tmp_path / "spool"), "--exit-timeout", "10",
        "--", sys.executable, "-c", JOB,
    )  # fmt: skip
    launcher = subprocess.Popen(
        cmd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while log_bytes(data) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert log_bytes(data) > 0, "nothing stored before the kill"
        launcher.send_signal(signal.SIGKILL)
        # The job (the launcher's child, same session) still holds the pipes: they close
        # when it ends.
        out, err = launcher.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launcher.pid, signal.SIGKILL)
        assert collector.stop() == 0
    assert out == "job done\n"  # the user's job ran to its end
    lost = [line for line in err.splitlines() if "lost the connection" in line]
    assert len(lost) == 1 and lost[0].startswith("tfprof: "), err
    counted = re.search(r"^tfprof: ([\d,]+) GPU records of this process were not delivered", err,
                        re.M)  # fmt: skip
    assert counted is not None and int(counted.group(1).replace(",", "")) > 0, err

    jobs = subprocess.run(collector_cmd("jobs", "--data-dir", str(data)), env=clean_env(),
                          capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    assert "incomplete" in jobs.stdout
    assert "orphaned " in jobs.stdout and "agent lost: no goodbye from 1 stream(s)" in jobs.stdout
