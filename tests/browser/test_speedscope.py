"""``export --format speedscope`` opened in a real speedscope (its npm package's offline
build, served on 127.0.0.1, in headless Chromium): the GPU time of a real Kineto trace
(TraceLens, BERT on an H100) by the Python stack that launched it.

scripts/install_browser.sh installs the package into ``.venv/viewers``; without it
the test skips (fails under ``TFPROF_REQUIRE_BROWSER=1``). ``TFPROF_UPDATE_SCREENSHOTS=1``
writes the picture the code-view guide shows into docs/images/."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.browser.npm_viewers import npm_package
from tests.browser.perfetto_ui import Browser, serve
from tests.browser.traces import REPO
from tfprof.collector.cli import main as collector

pytestmark = pytest.mark.browser

TRACE = REPO / "tests/data/traces/tracelens/h100__gaunernst_bert-small-uncased__1016001.json.gz"
SHOT = REPO / "docs" / "images" / "speedscope-bert.png"
UPDATE = os.environ.get("TFPROF_UPDATE_SCREENSHOTS") == "1"
LOAD_TIMEOUT_MS = 60_000


def test_speedscope_shows_gpu_time_by_python_line(browser: Browser, tmp_path: Path) -> None:
    build = npm_package("speedscope", "dist/release")
    profile = tmp_path / "bert.speedscope.json"
    assert collector(["export", str(TRACE), "-o", str(profile)]) == 0
    with gzip.open(TRACE) as f:
        events = json.load(f)["traceEvents"]
    gpu_us = sum(e["dur"] for e in events if e.get("cat") in ("kernel", "gpu_memcpy"))

    errors: list[str] = []
    page = browser.new_page()
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        with serve(build, tmp_path) as base:
            page.goto(f"{base}/index.html#profileURL={base}/traces/{profile.name}")
            # the profile's name in the toolbar: the file was read and its profile chosen
            name = "h100__gaunernst_bert-small-uncased__1016001 task 0: GPU time"
            page.get_by_text(name).wait_for(timeout=LOAD_TIMEOUT_MS)
            page.wait_for_timeout(500)  # the flame chart's first frame
            page.screenshot(path=str(tmp_path / SHOT.name))
            # the sandwich view is a table (DOM): functions with their total GPU time
            page.get_by_text("Sandwich", exact=False).click()
            page.get_by_text("Symbol Name").wait_for(timeout=LOAD_TIMEOUT_MS)
            by_self = page.locator("body").inner_text()
            page.get_by_text("Total", exact=True).click()  # rows by total (a virtual list)
            page.wait_for_timeout(300)
            text = page.locator("body").inner_text()
    finally:
        page.close()
    assert not errors, errors
    assert "forward (transformers/models/bert/modeling_bert.py:1306)" in text
    assert "run_on_input" in text
    # per function: total and own GPU time; the outermost frame has all of the trace's
    assert f"{gpu_us:.2f}µs (100%)" in text, text[:2000]
    assert "197.60µs (64%)\n\t197.60µs (64%)\n\t<built-in function linear>" in by_self
    if UPDATE:
        SHOT.parent.mkdir(exist_ok=True)
        shutil.copyfile(tmp_path / SHOT.name, SHOT)
