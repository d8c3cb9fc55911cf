"""Each timeline file opened in the real Perfetto UI shows what the file holds.

The UI's own trace_processor (WebAssembly, in the page) is asked what it imported, and
that is compared with the file read with its format's own definition (counts.py): every
slice on the track the file puts it on, every flow with both ends, every counter sample
on its named counter track, and no stats row saying something was left out. For the
.pftrace, the UI's groups are the jobs and its rows the pseudo-devices, named in full, in
the order the file asks for.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser.counts import file_counts, group_titles, problems, row_order, ui_counts
from tests.browser.perfetto_ui import Browser
from tests.browser.traces import ABOUT

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("name", list(ABOUT))
def test_the_perfetto_ui_shows_what_the_file_holds(
    name: str, browser: Browser, traces: dict[str, Path]
) -> None:
    path = traces[name]
    own = file_counts(path)
    with browser.open(path) as ui:
        shown, lost, titles, tree = ui_counts(ui), problems(ui), group_titles(ui), ui.track_tree()
    assert lost == []  # no import error, no data loss, not even one filed as 'info'
    assert shown.row() == own.row()
    assert shown.slice_tracks == own.slice_tracks  # every track, named so, its slices all
    assert shown.counter_tracks == own.counter_tracks
    assert own.slices and own.slice_tracks
    if not name.endswith(".pftrace"):
        return  # the UI titles a JSON file's processes by its own rules: see the docs
    jobs = {task.split("/task:")[0] for task in own.tasks}
    assert sorted(titles) == sorted(["System", *jobs])  # a group per job, named in full
    rows = {title: [child[0] for child in children] for title, children in tree}
    assert {job: rows[job] for job in jobs} == row_order(path)  # in the file's order
