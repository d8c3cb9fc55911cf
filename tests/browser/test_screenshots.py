"""The docs' pictures of the Perfetto UI, taken from our own files by this suite.

Each run takes them again and checks the docs hold one of each, shown on the viewers
page; ``TFPROF_UPDATE_SCREENSHOTS=1`` writes them into docs/images/ (what changes from
run to run, pids and the wall clock, is in the files, so they are not compared pixel by
pixel)."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import pytest

from tests.browser.perfetto_ui import Browser, PerfettoPage
from tests.browser.traces import REPO

pytestmark = pytest.mark.browser

DOCS = REPO / "docs"
PAGE = DOCS / "guides" / "viewers.md"
UPDATE = os.environ.get("TFPROF_UPDATE_SCREENSHOTS") == "1"
SIZE = (1600, 1000)  # the browser's viewport
# picture: (file, whether to zoom onto the last launches, where the host calls and the
# kernels they launched can be read, rather than show the whole trace)
SHOTS = {
    "perfetto-demo.png": ("demo.pftrace", True),
    "perfetto-two-jobs.png": ("jobs2.pftrace", False),
    "perfetto-ranks.png": ("ranks.pftrace", False),
}
LAST_LAUNCHES = 40


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def last_launches(ui: PerfettoPage) -> tuple[int, int] | None:
    """The time span of the GPU work the last ``LAST_LAUNCHES`` flows end at, padded."""
    rows = ui.query(
        "select s.ts as ts, s.ts + s.dur as te from flow f join slice s on f.slice_in = s.id "
        f"order by s.ts desc limit {LAST_LAUNCHES}"
    )
    if not rows:
        return None
    start, end = min(r["ts"] for r in rows), max(r["te"] for r in rows)
    pad = max(1, (end - start) // 20)
    return start - pad, end + pad


@pytest.mark.parametrize("image", SHOTS)
def test_the_docs_show_the_perfetto_ui_on_our_files(
    image: str, browser: Browser, traces: dict[str, Path], tmp_path: Path
) -> None:
    trace, zoom = SHOTS[image]
    shot = tmp_path / image
    with browser.open(traces[trace]) as ui:
        ui.screenshot(shot, last_launches(ui) if zoom else None)
    assert png_size(shot.read_bytes()) == SIZE
    target = DOCS / "images" / image
    if UPDATE:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, target)
    assert target.is_file(), f"{target} is missing: TFPROF_UPDATE_SCREENSHOTS=1 writes it"
    assert png_size(target.read_bytes()) == SIZE
    assert f"../images/{image}" in PAGE.read_text(encoding="utf-8"), f"{PAGE} shows no {image}"
