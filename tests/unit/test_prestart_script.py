"""What ``tfprof-agent run`` tells from the command before and after the job: the script a
Python interpreter would run (missing: refused before anything starts), and whether a
job that ended failed to start (launcher.failed_to_start)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tfprof.agent.inprocess.errors import ScriptNotFound
from tfprof.agent.launch.launcher import FAILED_START_S, failed_to_start
from tfprof.agent.launch.prestart import check_script, python_script


@pytest.mark.parametrize(
    ("command", "script"),
    [
        (["python3", "train.py", "--lr", "1"], "train.py"),
        (["/usr/bin/python3.11", "-u", "-OO", "train.py"], "train.py"),
        (["python", "-W", "ignore", "train.py"], "train.py"),
        (["python", "-Wignore", "-X", "dev", "train.py"], "train.py"),
        (["python3", "--check-hash-based-pycs", "never", "t.py"], "t.py"),
        (["python3", "--", "t.py"], "t.py"),
        (["python3", "-c", "print(1)"], None),
        (["python3", "-uc", "print(1)"], None),
        (["python3", "-m", "torch.distributed.run", "t.py"], None),
        (["python3", "-"], None),
        (["python3"], None),
        (["python3", "-i"], None),
        (["python3", "--version"], None),
        (["torchrun", "train.py"], None),
        (["bash", "run.sh"], None),
    ],
)
def test_the_script_a_python_command_runs(command: list[str], script: str | None) -> None:
    assert python_script(command) == script


def test_a_missing_script_is_refused_and_an_existing_one_is_not(tmp_path: Path) -> None:
    with pytest.raises(
        ScriptNotFound, match=re.escape("python3: can't open file 'nosuch.py'")
    ) as info:
        check_script(["python3", "nosuch.py"])
    assert info.value.exit_code == 2
    real = tmp_path / "real.py"
    real.write_text("")
    check_script(["python3", str(real)])
    check_script(["python3", str(tmp_path)])  # a folder with __main__.py is Python's call
    check_script(["python3", "-c", "pass"])


def test_failed_to_start_needs_a_not_started_status_early_and_no_record() -> None:
    for status in (2, 126, 127):
        assert failed_to_start(status, 0.3, 0)
    assert not failed_to_start(1, 0.3, 0)  # a job that ran and raised
    assert not failed_to_start(5, 0.1, 0)  # a short job that chose its status
    assert not failed_to_start(0, 0.1, 0)
    assert not failed_to_start(-9, 0.1, 0)  # killed by a signal
    assert not failed_to_start(2, 0.3, 1)  # it traced something
    assert not failed_to_start(2, FAILED_START_S + 0.1, 0)  # it ran a while
