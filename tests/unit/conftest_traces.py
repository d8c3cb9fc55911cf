"""Where the real GPU traces live (the same rule as tests/integration/conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def shared_traces() -> Path:
    env = os.environ.get("TFPROF_SHARED_DATA")
    base = Path(env) if env else REPO.parent / "shared" / "data"
    return base / "traces"
