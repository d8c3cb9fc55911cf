"""The integration tests' spool directory is removed when the session ends."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .conftest import REPO


def test_a_test_session_leaves_no_spool_directory_behind(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # where tempfile.mkdtemp makes it
    one_test = (
        "tests/integration/test_run_checks.py::test_command_not_found_comes_before_any_notice"
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", one_test,
         "--basetemp", str(tmp_path / "basetemp")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert list(tmp_path.glob("tfprof-test-spool-*")) == []
