"""Read-only commands on a data dir that does not exist: one line, exit 2, nothing made."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfprof.collector.cli import main


@pytest.mark.parametrize(
    "argv",
    [
        ["jobs"],
        ["summary"],
        ["advise"],
        ["export", "-o", "out.json"],
    ],
    ids=lambda argv: argv[0],
)
def test_a_mistyped_data_dir_is_reported_and_not_created(
    argv: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "dta"
    assert main([*argv, "--data-dir", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err == f"tfprof-collector: no such data dir: {missing}\n"
    assert not missing.exists()
    assert list(tmp_path.iterdir()) == []


def test_an_existing_empty_data_dir_is_left_as_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["jobs", "--data-dir", str(tmp_path)]) == 0
    assert "no jobs in" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []
