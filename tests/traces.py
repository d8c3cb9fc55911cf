"""Where the real GPU traces live, for every test that uses them.

The repository ships the small ones (tests/data/traces, with their licences), so a clone
with nothing beside it runs every test that replays them. ``TFPROF_SHARED_DATA`` may name
another data folder (or its ``traces`` folder); the ``shared`` folder beside the
repository (as on CI) is used when the shipped copy is missing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _find() -> Path | None:
    env = os.environ.get("TFPROF_SHARED_DATA")
    candidates = [Path(env) / "traces", Path(env)] if env else []
    candidates.append(REPO / "tests" / "data" / "traces")
    candidates.append(REPO.parent / "shared" / "data" / "traces")
    for candidate in candidates:
        if (candidate / "tf-timeline-ikhlestov").is_dir():
            return candidate
    return None


TRACES: Path | None = _find()
MISSING = "shared trace fixtures not found (../shared/data/traces or $TFPROF_SHARED_DATA)"
needs_traces = pytest.mark.skipif(TRACES is None, reason=MISSING)


def shared_traces() -> Path:
    """The traces folder; skips the calling test when there is none."""
    if TRACES is None:
        pytest.skip(MISSING)
    return TRACES
