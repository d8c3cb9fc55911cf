"""The npm packages the browser suite serves beside its viewers (scripts/install_browser.sh
installs them into ``VENV/viewers``; ``TFPROF_VIEWERS`` names another node_modules)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.browser.conftest import REQUIRED


def npm_package(name: str, inside: str) -> Path:
    """``inside`` (a file or folder) of the installed package ``name``; skips the test
    without it (fails under ``TFPROF_REQUIRE_BROWSER=1``)."""
    named = os.environ.get("TFPROF_VIEWERS")
    root = Path(named) if named else Path(sys.prefix) / "viewers" / "node_modules"
    found = root / name / inside
    if not found.exists():
        why = f"no {name} npm package in {root} (bash scripts/install_browser.sh)"
        if REQUIRED:
            pytest.fail(f"TFPROF_REQUIRE_BROWSER=1 but {why}", pytrace=False)
        pytest.skip(why)
    return found
