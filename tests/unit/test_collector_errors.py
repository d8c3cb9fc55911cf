"""The collector's error tree: exit codes, gRPC status codes, and one line from ``main``."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

import grpc
import pytest

from tests.unit.store_batches import batch, hello
from tfprof.collector import cli
from tfprof.collector.commands import jobs as jobs_command
from tfprof.collector.config import ConfigError
from tfprof.collector.errors import (
    CannotListen,
    CollectorError,
    Conflict,
    InvalidArgument,
    NotFound,
    PathError,
    StorageUnavailable,
)
from tfprof.collector.service.server import CollectorServer, status_for
from tfprof.collector.store import Store
from tfprof.core.errors import InputError, TfprofError
from tfprof.core.names import InvalidName
from tfprof.core.tracks import TrackKeyError


@pytest.mark.parametrize(
    ("error", "exit_code"),
    [(InvalidArgument, 2), (NotFound, 2), (PathError, 2), (ConfigError, 2), (Conflict, 1),
     (StorageUnavailable, 1), (CannotListen, 1), (CollectorError, 1)],
)  # fmt: skip
def test_collector_errors_are_tfprof_errors_with_exit_codes(
    error: type[CollectorError], exit_code: int
) -> None:
    assert issubclass(error, TfprofError)
    assert error("x").exit_code == exit_code


def test_invalid_argument_is_the_cores_input_error() -> None:
    assert issubclass(InvalidArgument, InputError)
    assert issubclass(ConfigError, CollectorError)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (InvalidArgument("x"), grpc.StatusCode.INVALID_ARGUMENT),
        (InvalidName("x"), grpc.StatusCode.INVALID_ARGUMENT),
        (TrackKeyError("x"), grpc.StatusCode.INVALID_ARGUMENT),
        (NotFound("x"), grpc.StatusCode.NOT_FOUND),
        (Conflict("x"), grpc.StatusCode.ABORTED),
        (StorageUnavailable("x"), grpc.StatusCode.UNAVAILABLE),
        (TfprofError("x"), grpc.StatusCode.INTERNAL),
    ],
)
def test_status_codes_come_from_one_table(error: TfprofError, code: grpc.StatusCode) -> None:
    assert status_for(error) == code


def test_path_error_names_the_path_and_the_reason(tmp_path: Path) -> None:
    err = PathError.from_os("output file", tmp_path / "x", FileNotFoundError(2, "No such file"))
    assert str(err) == f"output file {tmp_path / 'x'}: No such file"


def test_main_prints_one_line_and_the_exit_code_of_a_core_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.json"
    trace.write_text("[]")
    code = cli.main(["import", str(trace), "--job", "bad name", "--data-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("tfprof-collector: invalid job name 'bad name'") and err.count("\n") == 1


def test_main_lets_a_bug_keep_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(args: argparse.Namespace) -> int:
        raise ValueError("a bug, not a usage error")

    monkeypatch.setattr(jobs_command, "run", broken)  # main builds its parser afresh
    with pytest.raises(ValueError, match="a bug"):
        cli.main(["jobs", "--data-dir", "unused"])


def test_an_unwritable_output_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    writer = Store(tmp_path / "data").open_stream(hello())
    writer.append(batch(1, [1_000, 2_000]))
    writer.close()
    out = tmp_path / "no-such-dir" / "out.txt"
    code = cli.main(["summary", "--data-dir", str(tmp_path / "data"), "-o", str(out)])
    err = capsys.readouterr().err
    assert (code, err.count("\n")) == (2, 1), err
    assert f"output file {out}:" in err


def test_a_data_dir_that_cannot_be_created_is_a_path_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(PathError, match=f"data dir {blocker / 'data'}"):
        Store(blocker / "data")


def test_an_address_in_use_is_cannot_listen(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(CannotListen, match=f"127.0.0.1:{port}"):
            CollectorServer(f"127.0.0.1:{port}", str(tmp_path / "data"))
