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
