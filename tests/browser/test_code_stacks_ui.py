"""Python stacks in the Perfetto export, in the Perfetto UI (v52, headless Chromium): the
BERT trace recorded with_stack=True (TraceLens, H100), exported to .pftrace, shows each
launch's Python stack as a callstack sample on its thread, with the stack's frames, and
a selection of the track gives the flame graph. ``TFPROF_UPDATE_SCREENSHOTS=1`` writes
the picture the code-view guide shows into docs/images/."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.browser.perfetto_ui import Browser
from tests.browser.traces import REPO
from tfprof.collector.cli import main as collector

pytestmark = pytest.mark.browser

TRACE = REPO / "tests/data/traces/tracelens/h100__gaunernst_bert-small-uncased__1016001.json.gz"
SHOT = REPO / "docs" / "images" / "perfetto-stacks-bert.png"
UPDATE = os.environ.get("TFPROF_UPDATE_SCREENSHOTS") == "1"


def test_launch_stacks_are_callstack_samples_on_their_thread(
    browser: Browser, tmp_path: Path
) -> None:
    out = browser.traces / "bert-stacks.pftrace"  # the folder the browser serves
    assert collector(["export", str(TRACE), "-o", str(out)]) == 0
    try:
        with browser.open(out) as ui:
            # the trace's 61 launches (60 kernels, a copy), each with its stack
            assert ui.query("select count(*) as n from cpu_profile_stack_sample") == [{"n": 61}]
            (thread,) = ui.query(
                "select t.tid, t.name, p.name as process from thread t join process p "
                "using (upid) where t.name like 'thread %'"
            )
            assert thread["tid"] == 19392 and thread["name"] == "thread 19392"
            assert "/task:0 Python stacks" in thread["process"]
            # the innermost frame of each sample: the model's calls, by file:line:function
            leaves = ui.query(
                "select f.name, count(*) as n from cpu_profile_stack_sample s "
                "join stack_profile_callsite c on c.id = s.callsite_id "
                "join stack_profile_frame f on f.id = c.frame_id group by f.name"
            )
            by_leaf = {r["name"]: r["n"] for r in leaves}
            assert by_leaf["<built-in function linear>"] == 26
            roots = ui.query(
                "select distinct f.name from stack_profile_callsite c "
                "join stack_profile_frame f on f.id = c.frame_id where c.depth = 0"
            )
            assert roots == [{"name": "<string>:1:<module>"}]
            # the samples lie inside the timeline's span (the same clock)
            (span,) = ui.query(
                "select (select min(ts) from cpu_profile_stack_sample) as first, "
                "(select max(ts) from cpu_profile_stack_sample) as last, "
                "(select max(ts + dur) from slice) as end_"
            )
            assert 0 <= span["first"] <= span["last"] <= span["end_"]
            ui.page.get_by_text("Python stacks", exact=False).first.click()
            ui.page.wait_for_timeout(1000)
            ui.page.screenshot(path=str(tmp_path / SHOT.name))
    finally:
        out.unlink(missing_ok=True)
    if UPDATE:
        shutil.copyfile(tmp_path / SHOT.name, SHOT)
