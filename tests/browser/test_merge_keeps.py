"""A file made from others holds what they hold: ``merge`` to either format, merging our
own file again, and merging runs (jobs, ranks) keep every slice, flow and counter sample,
and the jobs and tasks the tracks are named after. Read from the files alone (no browser)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser.counts import combined, file_counts
from tests.browser.traces import ABOUT

MADE_FROM = [name for name, (_, sources) in ABOUT.items() if sources]


@pytest.mark.parametrize("name", MADE_FROM)
def test_a_merged_file_holds_what_its_sources_hold(name: str, traces: dict[str, Path]) -> None:
    folder = traces[name].parent
    mine = file_counts(traces[name])
    theirs = combined([file_counts(folder / source) for source in ABOUT[name][1]])
    figures = ("slices", "flows", "counter samples", "counter tracks", "slice tracks")
    assert {f: mine.row()[f] for f in figures} == {f: theirs.row()[f] for f in figures}
    assert mine.tasks == theirs.tasks  # the same /job:J/task:T in the track names
    assert sorted(mine.counter_tracks.values()) == sorted(theirs.counter_tracks.values())
