"""Text for people, the collector's one renderer: aligned tables and emphasised lines.

Built on rich. Style (bold) goes out only when the output is a terminal and NO_COLOR is
not set, both as rich detects them; anywhere else the text is plain and stable for
scripts: columns two spaces apart, no trailing spaces. Nothing is ever wrapped or cut,
so a long kernel name keeps its one line, as the terminal itself would show it.

``progress`` shows long work (loading, exporting, importing) on stderr, on a terminal only.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, TextIO

from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.text import Text

if TYPE_CHECKING:
    from rich.progress import ProgressColumn

# Wider than any line we print: rich wraps and crops at the console width.
UNLIMITED_WIDTH = 1 << 20


def use_colour(out: TextIO) -> bool:
    """Style only on a terminal, and never when NO_COLOR is set (no-color.org)."""
    console = Console(file=out)
    return console.is_terminal and not console.no_color


class TextWriter:
    """Writes lines and tables to ``out``; ``colour`` None: decide by ``use_colour``."""

    def __init__(self, out: TextIO, colour: bool | None = None) -> None:
        self._out = out
        styled = use_colour(out) if colour is None else colour
        self._styled = styled
        self._console = Console(
            force_terminal=styled,
            # Bold is all we use: the basic ANSI set has it on every terminal.
            color_system="standard" if styled else None,
            width=UNLIMITED_WIDTH,
            # Values are data, never markup, emoji codes or things to highlight.
            markup=False,
            emoji=False,
            highlight=False,
        )

    def line(self, text: str = "", *, bold: bool = False) -> None:
        self._write(Text(text, style="bold" if bold else ""))

    def table(
        self,
        header: Sequence[str],
        rows: Sequence[Sequence[str]],
        right_aligned: Sequence[bool] | None = None,
    ) -> None:
        """Columns of ``rows`` under a bold ``header``; numbers usually right-aligned."""
        right = right_aligned or [False] * len(header)
        if not self._styled and plain_table(self._out, header, rows, right):
            return
        from rich.table import Table  # styled or unusual cells only: most runs never need it

        table = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold")
        for title, align_right in zip(header, right, strict=True):
            table.add_column(title, justify="right" if align_right else "left", no_wrap=True)
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))
        self._write(table)

    def _write(self, renderable: RenderableType) -> None:
        with self._console.capture() as captured:
            self._console.print(renderable)
        # rich pads every cell to its column's width, the last one too.
        self._out.writelines(line.rstrip() + "\n" for line in captured.get().splitlines())


def _cells(text: str) -> int:
    """Cells on a terminal: ASCII one each, anything else as rich counts it (µ: one)."""
    return len(text) if text.isascii() else cell_len(text)


def plain_table(
    out: TextIO, header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]
) -> bool:
    """Write the table exactly as ``TextWriter.table`` lays it out without style (each
    column as wide as its widest cell, left or right justified, two spaces between
    columns, trailing spaces stripped), in a fraction of rich's time (it measures and
    pads every cell through its renderables: seconds for a kernels view of thousands of
    rows). False, with nothing written, for a cell rich lays out its own way (control
    characters, leading or trailing spaces)."""
    columns = [[h, *(row[i] for row in rows)] for i, h in enumerate(header)]
    texts = ["".join(c) for c in columns]
    if not columns or not all(t.isprintable() for t in texts):
        return False
    if any(c[:1].isspace() or c[-1:].isspace() for col in columns for c in col):
        return False
    cells: list[list[str]] = []
    for col, text, r in zip(columns, texts, right, strict=True):
        if text.isascii():  # one cell per character: str's own padding
            w = max(map(len, col))
            cells.append([c.rjust(w) if r else c.ljust(w) for c in col])
            continue
        widths = [_cells(c) for c in col]
        w = max(widths)
        pairs = zip(col, widths, strict=True)
        cells.append([" " * (w - n) + c if r else c + " " * (w - n) for c, n in pairs])
    out.writelines("  ".join(line).rstrip() + "\n" for line in zip(*cells, strict=True))
    return True


def _ignore(amount: float = 1) -> None:
    """Progress that goes nowhere: the output is not a terminal."""


@contextlib.contextmanager
def progress(
    description: str, total: float | None = None, *, unit: str = "", out: TextIO | None = None
) -> Iterator[Callable[[float], None]]:
    """Shows ``description`` with a spinner, elapsed time and what was done so far, on
    ``out`` (stderr) while the block runs; yields ``advance(amount)``.

    Only on a terminal: piped or redirected, nothing at all is written. ``unit`` "bytes"
    shows sizes, anything else a count (``total`` None: no bar, as the end is unknown).
    The line is cleared when the block ends, also on an error or Ctrl-C.
    """
    console = Console(file=sys.stderr if out is None else out)
    if not console.is_terminal:
        yield _ignore
        return
    from rich.progress import (  # on a terminal only: piped runs never load it
        BarColumn,
        FileSizeColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    done: ProgressColumn = (
        FileSizeColumn() if unit == "bytes" else TextColumn(f"{{task.completed:,.0f}} {unit}")
    )
    columns: list[str | ProgressColumn] = [SpinnerColumn(), TextColumn("{task.description}")]
    if total is not None:
        columns.append(BarColumn())
    columns += [done, TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(description, total=total)

        def advance(amount: float = 1) -> None:
            bar.advance(task, amount)

        yield advance
