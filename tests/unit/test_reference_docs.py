"""docs/reference/ says what the code says: scripts/gen_reference.py --check, in pytest.

The pages are generated from the CLIs' parsers, the option tables, the lake schema and
the metrics registry; a change to any of them without regenerating fails here (and in
.ci/run), naming the page.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def gen_reference() -> ModuleType:
    # As `python scripts/gen_reference.py` runs it: its folder first on sys.path.
    if str(ROOT / "scripts") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location(
        "gen_reference", ROOT / "scripts" / "gen_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_pages_are_current() -> None:
    gen = gen_reference()
    assert gen.stale(ROOT / "docs", gen.pages()) == []


def test_every_benchmark_result_is_on_a_page() -> None:
    gen = gen_reference()
    assert gen.unlisted_results(ROOT / "docs") == []


def test_check_names_a_stale_missing_or_orphaned_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gen = gen_reference()
    rendered = gen.pages()
    assert sorted(gen.write(tmp_path, rendered)) == sorted(rendered)
    assert gen.stale(tmp_path, rendered) == []

    lake = tmp_path / "reference" / "lake.md"
    lake.write_text(lake.read_text().replace("| `start_ns` |", "| `begin_ns` |", 1))
    (tmp_path / "reference" / "metrics.md").unlink()
    orphan = tmp_path / "reference" / "gone.md"
    orphan.write_text(gen.MARKER + "\n# a table that was removed\n")
    (tmp_path / "reference" / "by-hand.md").write_text("# written by hand\n")
    assert gen.stale(tmp_path, rendered) == [
        "reference/lake.md",
        "reference/metrics.md",
        "reference/gone.md",
    ]
    assert gen.main(["--check", "--docs-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "reference/lake.md is stale" in err and "reference/gone.md is stale" in err

    gen.write(tmp_path, rendered)  # rewrites the two, deletes the orphan, keeps by-hand.md
    assert not orphan.exists() and (tmp_path / "reference" / "by-hand.md").exists()
    assert gen.stale(tmp_path, rendered) == []


def test_every_option_and_command_is_on_its_page() -> None:
    """The pages cover what the code declares (a generator that skipped rows would still
    be 'current')."""
    from tfprof.agent.inprocess.config import OPTIONS as AGENT
    from tfprof.collector.cli import build_parser
    from tfprof.collector.config import OPTIONS as COLLECTOR

    reference = ROOT / "docs" / "reference"
    agent = (reference / "agent-settings.md").read_text()
    assert all(f"| `{o.env}` |" in agent for o in AGENT.values())
    collector = (reference / "collector-settings.md").read_text()
    assert all(f"`{o.env}`" in collector for o in COLLECTOR.values())
    cli = (reference / "tfprof-collector.md").read_text()
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    for name, parser in sub.choices.items():
        section = cli.split(f"## `tfprof-collector {name}`\n")[1].split("\n## ")[0]
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            for flag in action.option_strings:
                assert f"`{flag}" in section or f", {flag}" in section, (name, flag)
