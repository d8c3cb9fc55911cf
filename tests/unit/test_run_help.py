"""`tfprof-agent --help`: every command and option explained, defaults shown, and the
output suffixes it lists are exactly those the collector's export registry writes."""

from __future__ import annotations

import argparse
import re

import pytest

from tfprof.agent import cli
from tfprof.agent.inprocess import config


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_command_has_a_description_an_example_and_help_for_every_argument() -> None:
    parser = cli.build_parser()
    assert parser.description and "example" in (parser.epilog or "")
    for name, sub in _subparsers(parser).items():
        assert sub.description, name
        assert "example" in (sub.epilog or ""), name
        for action in sub._actions:
            assert action.help and action.help != argparse.SUPPRESS, (name, action.dest)
        text = sub.format_help()
        assert "README" not in text, name  # a pip user has no README


def test_every_run_option_shows_its_default() -> None:
    run = _subparsers(cli.build_parser())["run"]
    for action in run._actions:
        if action.option_strings and action.dest != "help":
            assert "(default: " in (action.help or ""), action.dest


def test_the_listed_output_suffixes_are_those_the_collector_writes() -> None:
    embedded = pytest.importorskip("tfprof.collector.embedded")
    listed = re.findall(r"\.[a-z][a-z.-]*[a-z]", config.OPTIONS["output"].doc)
    assert sorted(listed) == sorted(embedded.OUTPUT_SUFFIXES)
