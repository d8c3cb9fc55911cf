"""A mistyped subcommand or choice gets one line naming the nearest one, and exit status 2,
in both command lines (``tfprof.core.cli_parser``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tfprof.agent.cli import main as agent_main
from tfprof.collector.cli import main as collector_main
from tfprof.core.cli_parser import nearest


def one_error_line(capsys: pytest.CaptureFixture[str], run: object, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        run(argv)  # type: ignore[operator]
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["expor"], "tfprof-collector: unknown command 'expor'; did you mean 'export'?"),
        (["sumary", "x.json"], "did you mean 'summary'?"),
        (["captur", "--all"], "did you mean 'capture'?"),
        (["summary", "x.json", "--view", "kernal"], "--view 'kernal' is not one of kernels"),
        (["summary", "x.json", "--view", "kernal"], "did you mean 'kernels'?"),
        (["summary", "x.json", "--format", "jsn"], "did you mean 'json'?"),
        (["export", "a.json", "-o", "b", "--format", "perfeto"], "did you mean 'perfetto'?"),
        (["top", "--sort", "bussy", "--once"], "did you mean 'busy'?"),
    ],
)
def test_the_collector_suggests_the_nearest(
    capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    line = one_error_line(capsys, collector_main, argv)
    assert line.startswith("tfprof-collector")
    assert says in line


def test_nothing_close_gets_no_guess(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_error_line(capsys, collector_main, ["xyzzy"])
    assert "did you mean" not in line
    assert "unknown command 'xyzzy'" in line and "`tfprof-collector --help`" in line


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["rn", "python3", "x.py"], "tfprof-agent: unknown command 'rn'; did you mean 'run'?"),
        (["deamon", "--collector", "h:1"], "did you mean 'daemon'?"),
        (["run", "--api", "onn", "--", "true"], "--api 'onn' is not one of on, off"),
        (["env", "--format", "jsno"], "did you mean 'json'?"),
    ],
)
def test_the_agent_suggests_the_nearest(
    capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    assert says in one_error_line(capsys, agent_main, argv)


def test_nearest_takes_a_unique_prefix_too() -> None:
    assert nearest("sum", ["summary", "sql", "serve"]) == "summary"
    assert nearest("s", ["summary", "sql", "serve"]) is None  # several start so
    assert nearest("exprot", ["export", "import"]) == "export"


@pytest.mark.parametrize("tool", ["tfprof.collector.cli", "tfprof.agent.cli"])
def test_a_real_process_says_one_line_and_exits_2(tool: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", tool, "helpp"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "unknown command 'helpp'" in done.stderr
