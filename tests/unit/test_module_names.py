"""No two modules of one distribution share a file name: a name says which module it is.

``__init__.py`` files aside, a reader who sees ``summary.py`` or ``captures.py`` in a
traceback or a review knows which one is meant.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTIONS = ("proto", "readers", "agent", "collector")


def module_names(distribution: str) -> list[str]:
    return [
        path.name
        for path in (ROOT / distribution / "src").rglob("*.py")
        if path.name != "__init__.py" and "_pb2" not in path.name
    ]


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_module_file_names_are_unique_within_a_distribution(distribution: str) -> None:
    names = module_names(distribution)
    assert names, f"no modules found under {distribution}/src"
    repeated = sorted(name for name, n in Counter(names).items() if n > 1)
    assert not repeated, f"{distribution}: modules sharing a name: {repeated}"
