"""Where the real GPU traces of ../shared/data/traces live, for every test that uses them.

``TFPROF_SHARED_DATA`` may name the data folder (or its ``traces`` folder); otherwise the
``shared`` folder beside the repository is used, as on CI. Tests that need the traces
skip, saying why, where they are missing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _find() -> Path | None:
    env = os.environ.get("TFPROF_SHARED_DATA")
    candidates = [Path(env) / "traces", Path(env)] if env else []
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
