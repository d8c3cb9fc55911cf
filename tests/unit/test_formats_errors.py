"""The trace readers' errors: typed, one line, and a missing package names what to install."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tfprof.core.errors import FormatUnavailable, InputError, TraceFormatError
from tfprof.readers import read_trace
from tfprof.readers.tfprotos import step_stats

THIRD_PARTY = ("google.protobuf", "perfetto", "tensorboard", "tensorflow", "numpy", "orjson")


@pytest.mark.parametrize("error", [TraceFormatError, FormatUnavailable])
def test_format_errors_are_input_errors_not_value_errors(error: type[InputError]) -> None:
    assert issubclass(error, InputError)
    assert not issubclass(error, ValueError)
    assert error("x").exit_code == 2


def test_importing_the_readers_loads_no_third_party_package() -> None:
    code = (
        "import sys, tfprof.readers\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {THIRD_PARTY!r}"
        " or m.startswith('google.protobuf')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert loaded.strip() == "[]"


def test_a_directory_or_unknown_content_is_a_format_error(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="a directory"):
        read_trace(tmp_path)
    odd = tmp_path / "notes.txt"
    odd.write_bytes(b"plain words")
    with pytest.raises(TraceFormatError, match="not a trace tfprof can import") as info:
        read_trace(odd)
    assert str(odd) in str(info.value) and "\n" not in str(info.value)


def test_missing_perfetto_names_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "perfetto.protos.perfetto.trace.perfetto_trace_pb2", None)
    trace = tmp_path / "t.pftrace"
    trace.write_bytes(b"\x0a\x00")
    with pytest.raises(FormatUnavailable, match="pip install perfetto"):
        read_trace(trace)


def test_missing_tensorboard_names_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in ("tensorboard.compat.proto", "tensorflow.core.framework"):
        monkeypatch.setitem(sys.modules, f"{module}.step_stats_pb2", None)
    step_stats.cache_clear()
    trace = tmp_path / "run.pbtxt"
    trace.write_text("dev_stats {}")
    try:
        with pytest.raises(FormatUnavailable, match="pip install tensorboard"):
            read_trace(trace)
    finally:
        step_stats.cache_clear()  # the next caller finds the real protos again
