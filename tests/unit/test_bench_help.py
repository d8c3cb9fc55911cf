"""Every benchmark script answers ``--help`` with its usage and exits 0, before it builds,
imports or measures anything heavy (bench/README.md says each one's options are there)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py"))


def test_there_are_bench_scripts() -> None:
    assert "import_vs_hta.py" in SCRIPTS and "hook_cost.py" in SCRIPTS


@pytest.mark.timeout(120)
@pytest.mark.parametrize("script", SCRIPTS)
def test_help_works(script: str) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), "--help"],
        capture_output=True,
        text=True,
        timeout=100,
        cwd=BENCH.parent,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: "), done.stdout[:200]
    assert "Traceback" not in done.stderr
