"""``tfprof-collector --help`` everywhere: a description and an example for every
subcommand, help for every option and positional, defaults shown, no README pointer."""

from __future__ import annotations

import argparse

import pytest

from tfprof.collector.cli import build_parser


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("name", list(subcommands()))
def test_every_subcommand_explains_itself_with_an_example(name: str) -> None:
    parser = subcommands()[name]
    text = parser.format_help()
    assert parser.description, name
    assert f"example:\n  tfprof-collector {name} " in text
    assert "README" not in text
    undocumented = [a.dest for a in parser._actions if not a.help]
    assert undocumented == [], f"{name}: {undocumented}"


def test_defaults_are_shown() -> None:
    summary = subcommands()["summary"].format_help()
    assert "(default: kernels)" in summary and "(default: table)" in summary
    merge = subcommands()["merge"].format_help()
    assert "(default: " in merge
    assert "(default: None)" not in merge + summary


def test_the_top_level_help_lists_every_subcommand() -> None:
    # Subcommand help lines are %-formatted here: a bare "%" in one broke ``--help``.
    text = build_parser().format_help()
    assert all(name in text for name in subcommands())
