"""The golden test's harness: run ``tfprof-collector`` in-process, scrub what is volatile,
render a stable JSON text and compare it with (or write it to) its golden file.

Only the CLI's surface is used: the entry point named in pyproject.toml's
``[project.scripts]``, called as ``main(argv)``, so the test follows the module wherever
it moves.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import io
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "data" / "golden"
REGEN_ENV = "TFPROF_REGEN_GOLDEN"
REGEN = os.environ.get(REGEN_ENV) == "1"
REGEN_HINT = f"{REGEN_ENV}=1 .venv/bin/pytest tests/unit/test_golden_outputs.py"
MAX_DIFF_LINES = 150

# `import` names a run after the wall clock at import time plus a random suffix.
RUN_ID = re.compile(r"\bimport-\d{8}-\d{6}-[0-9a-f]{8}\b")
# `compact` gives a data dir a random 12-hex collector id, shown in jobs and sql `runs`.
COLLECTOR_ID = re.compile(r"\b[0-9a-f]{12}\b")
# Parquet bytes written by `compact`: every file carries the writing pyarrow's version.
PARQUET_BYTES = re.compile(r"\b[\d,]+ bytes\b")


def _main() -> Callable[[list[str]], int]:
    """``main`` of the module pyproject.toml's console script names (read from the source
    tree, not the installed metadata, which an editable install leaves stale when the
    module moves); no tomllib: Python 3.10 is supported."""
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    found = re.search(r'^tfprof-collector = "([\w.]+):\w+"', pyproject, re.MULTILINE)
    assert found, "pyproject.toml names no tfprof-collector script"
    return cast(Callable[[list[str]], int], importlib.import_module(found.group(1)).main)


MAIN = _main()


@contextlib.contextmanager
def _utc() -> Iterator[None]:
    """`jobs` prints record times in local time: pin the zone to UTC while it runs."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    try:
        yield
    finally:
        if old is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = old
        time.tzset()


def cli(*argv: str | Path) -> tuple[str, str]:
    """stdout and stderr of ``tfprof-collector ARGV``; fails the test unless it exits 0."""
    args = [str(a) for a in argv]
    out, err = io.StringIO(), io.StringIO()
    with _utc(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = MAIN(args)
        except SystemExit as exc:  # --help, --version: argparse exits
            rc = int(exc.code or 0)
    if rc != 0:
        pytest.fail(f"tfprof-collector {' '.join(args)}: exit {rc}\n{err.getvalue()}")
    return out.getvalue(), err.getvalue()


def cli_json(*argv: str | Path) -> Any:
    """The JSON a command prints, parsed. Its floats are Python's shortest repr, which
    ``render`` writes again: the golden text shows every figure as the CLI printed it."""
    out, err = cli(*argv)
    assert err == "", err
    return json.loads(out)


def help_choices(command: str, pattern: str) -> list[str]:
    """A comma-separated list the command's --help shows, e.g. --view's choices."""
    found = re.search(pattern, cli(command, "--help")[0])
    assert found, f"{command} --help no longer shows {pattern}"
    return [c.strip() for c in found.group(1).split(",")]


VERSION = cli("--version")[0].split()[-1]


class Scrub:
    """Replaces what changes from run to run, not with the code: the paths of this
    checkout and of the temporary folders, run ids, collector ids, Parquet sizes and the
    tool's version. Every figure of the traces themselves is kept as printed."""

    def __init__(self, paths: dict[Path, str]) -> None:
        # Longest first: a trace's path before the folder that holds it.
        self._paths = sorted(((str(p), n) for p, n in paths.items()), key=lambda x: -len(x[0]))

    def text(self, s: str) -> str:
        for path, name in self._paths:
            s = s.replace(path, name)
        s = RUN_ID.sub("<RUN_ID>", s)
        if s.startswith("compacted "):
            s = PARQUET_BYTES.sub("<N> bytes", s)
        return s

    def lines(self, s: str) -> list[str]:
        return self.text(s).splitlines()

    def table(self, s: str) -> list[str]:
        """The lines of `jobs`' table: ids replaced by placeholders as wide as they were,
        so that the columns stay aligned."""

        def pad(name: str) -> Callable[[re.Match[str]], str]:
            return lambda m: name.ljust(len(m.group()))

        s = COLLECTOR_ID.sub(pad("<COLLECTOR_ID>"), RUN_ID.sub(pad("<RUN_ID>"), s))
        return self.lines(s)

    def doc(self, obj: Any, key: str = "") -> Any:
        if isinstance(obj, dict):
            return {self.text(str(k)): self.doc(v, str(k)) for k, v in obj.items()}
        if isinstance(obj, list | tuple):
            return [self.doc(v, key) for v in obj]
        if isinstance(obj, str):
            if key == "version" and obj == VERSION:
                return "<VERSION>"
            if key == "collectors":  # sql `runs`: the collectors holding the run
                return COLLECTOR_ID.sub("<COLLECTOR_ID>", self.text(obj))
            return self.text(obj)
        return obj


def render(obj: Any, pad: str = "") -> str:
    """JSON with sorted keys, a container of plain values on one line (a row of a view,
    an event), so that a diff shows the row whose figure changed."""
    children = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list) else []
    if not any(isinstance(c, dict | list) and c for c in children):
        return json.dumps(obj, sort_keys=True, ensure_ascii=False)
    inner = pad + " "
    if isinstance(obj, dict):
        items = [f"{inner}{json.dumps(k)}: {render(obj[k], inner)}" for k in sorted(obj)]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    return "[\n" + ",\n".join(inner + render(v, inner) for v in obj) + "\n" + pad + "]"


def check(golden: Path, doc: Any, write: bool = True) -> None:
    """Compare ``doc`` with the golden file; under TFPROF_REGEN_GOLDEN=1 write it
    (``write``: this case owns the file) and skip."""
    text = render(doc) + "\n"
    name = golden.relative_to(REPO)
    if REGEN and write:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text, encoding="utf-8")
        pytest.skip(f"regenerated {name}")
    if not golden.is_file():
        pytest.fail(f"{name} is missing; write it with {REGEN_HINT}", pytrace=False)
    old = golden.read_text(encoding="utf-8")
    if old == text:
        return
    diff = list(
        difflib.unified_diff(
            old.splitlines(), text.splitlines(), str(name), "today's output", n=2, lineterm=""
        )
    )
    if len(diff) > MAX_DIFF_LINES:
        diff = [*diff[:MAX_DIFF_LINES], f"... {len(diff) - MAX_DIFF_LINES} more diff lines"]
    pytest.fail(
        f"output differs from {name} (if the change is intended: {REGEN_HINT}, then review "
        "git diff tests/data/golden):\n" + "\n".join(diff),
        pytrace=False,
    )
