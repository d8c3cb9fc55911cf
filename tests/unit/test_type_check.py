"""The type check resolves first-party imports: a wrong call across modules fails it.

Runs mypy with the project's configuration on small snippets: each wrong one must fail
with the error code named, and a right one must pass (so a failure is the call's fault,
not the set-up's).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

RIGHT = """
from tfprof.core.records import SYNC_NO_STREAM
from tfprof.core.tracks import TrackKey
from tfprof.collector.embedded import EmbeddedCollector

key: TrackKey = TrackKey.for_stream("job", "0", 0, SYNC_NO_STREAM)
text: str = key.format()
collector = EmbeddedCollector("/tmp/data")
"""

WRONG = {
    "str where an int is expected": (
        'from tfprof.core.tracks import TrackKey\nTrackKey.for_stream("job", "0", "0", 7)\n',
        "arg-type",
    ),
    "str where a TrackKey is expected": (
        "from tfprof.core.tracks import TrackKey\n"
        "def label(key: TrackKey) -> str:\n    return key.format()\n"
        'label("/job:a/task:0/gpu:0/stream:7")\n',
        "arg-type",
    ),
    "an attribute that does not exist": (
        "from tfprof.core.records import RecordKind\nRecordKind.KERNELS\n",
        "attr-defined",
    ),
    "a name a module does not define": (
        "from tfprof.collector.embedded import EmbeddedCollectr\n",
        "attr-defined",
    ),
    "the collector facade with the wrong argument": (
        "from tfprof.collector.embedded import EmbeddedCollector\nEmbeddedCollector(42)\n",
        "arg-type",
    ),
}


def mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--no-error-summary", "--hide-error-context", str(snippet)],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip


pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy not installed"),
]


def test_a_right_call_passes(tmp_path: Path) -> None:
    result = mypy(tmp_path, RIGHT)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("case", sorted(WRONG))
def test_a_wrong_call_fails(tmp_path: Path, case: str) -> None:
    source, code = WRONG[case]
    result = mypy(tmp_path, source)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"[{code}]" in result.stdout, result.stdout
