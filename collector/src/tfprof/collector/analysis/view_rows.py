"""What a view's need builds when the view says more than its rows: why it is empty or
partial, in a line each (shown above the table, after the jobs' notes)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ViewRows:
    rows: Sequence[Any]
    notes: tuple[str, ...] = ()
