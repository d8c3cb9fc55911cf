"""collector/terminal.py: the one text renderer, plain when piped, bold on a terminal."""

from __future__ import annotations

import io

import pytest

from tfprof.collector.terminal import TextWriter, use_colour


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_plain_table_is_stable_text() -> None:
    out = io.StringIO()
    TextWriter(out, colour=False).table(
        ["NAME", "COUNT", "NOTE"],
        [["gemm", "1,234", "x"], ["a-much-longer-name", "5", ""]],
        [False, True, False],
    )
    assert out.getvalue().splitlines() == [
        "NAME                COUNT  NOTE",
        "gemm                1,234  x",
        "a-much-longer-name      5",
    ]


def test_values_are_never_markup_wrapped_or_cut() -> None:
    name = "void k<float>[bold] :smile: " + "x" * 500
    out = io.StringIO()
    text = TextWriter(out, colour=False)
    text.line(name)
    text.table(["NAME"], [[name]])
    assert out.getvalue().splitlines() == [name, "NAME", name]


def test_bold_only_when_styled() -> None:
    for colour in (False, True):
        out = io.StringIO()
        text = TextWriter(out, colour=colour)
        text.line("title", bold=True)
        text.table(["A"], [["1"]])
        assert ("\x1b[1m" in out.getvalue()) is colour
        assert ("\x1b[" in out.getvalue()) is colour  # bold is the only style there is


def test_colour_follows_the_terminal_and_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    assert use_colour(Tty()) and not use_colour(io.StringIO())
    tty = Tty()
    TextWriter(tty).line("title", bold=True)
    assert "\x1b[1m" in tty.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_colour(Tty())
    tty = Tty()
    TextWriter(tty).line("title", bold=True)
    assert tty.getvalue() == "title\n"


def test_an_empty_line_and_an_empty_table() -> None:
    out = io.StringIO()
    text = TextWriter(out, colour=False)
    text.line()
    text.table(["A", "B"], [], [True, False])
    assert out.getvalue() == "\n" + "A  B\n"


@pytest.mark.parametrize("seed", range(10))
def test_the_plain_table_is_richs_table_without_style(seed: int) -> None:
    """Off a terminal the table skips rich (seconds for thousands of rows) and must
    still write rich's bytes: widths as rich counts cells (µ, wide CJK), alignment,
    two spaces between columns, no trailing spaces."""
    import numpy as np
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from tfprof.collector.terminal import UNLIMITED_WIDTH, plain_table

    rng = np.random.default_rng(seed)
    alphabet = ["a", "Z", "7", " ", ",", ".", "µ", "漢", "é", "-", "/"]
    width = int(rng.integers(1, 6))
    header = [f"H{i} (µs)" if i % 2 else f"COL{i}" for i in range(width)]
    rows = [
        ["".join(rng.choice(alphabet, int(rng.integers(0, 12)))).strip() for _ in range(width)]
        for _ in range(int(rng.integers(0, 40)))
    ]
    right = [bool(b) for b in rng.integers(0, 2, width)]
    plain = io.StringIO()
    assert plain_table(plain, header, rows, right)
    # What TextWriter.table wrote before the plain writer: rich, unstyled.
    console = Console(force_terminal=False, color_system=None, width=UNLIMITED_WIDTH,
                      markup=False, emoji=False, highlight=False)  # fmt: skip
    table = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold")
    for title, r in zip(header, right, strict=True):
        table.add_column(title, justify="right" if r else "left", no_wrap=True)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    with console.capture() as captured:
        console.print(table)
    assert plain.getvalue() == "".join(line.rstrip() + "\n" for line in captured.get().splitlines())
    for odd in ("\x1b[1m", " lead", "trail "):  # left to rich
        assert not plain_table(io.StringIO(), header, [[odd, *[""] * (width - 1)]], right)
