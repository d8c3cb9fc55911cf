"""``tfprof-collector serve`` refusing to start: a taken port, a data dir already served.

Each is one ``tfprof-collector:`` line on stderr and no traceback; the running
collector is left alone.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from tests.integration.collector_proc import start_serve
from tests.integration.conftest import clean_env, collector_cmd

pytestmark = pytest.mark.timeout(120)


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        collector_cmd("serve", *args),
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
    )


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _serve("--data-dir", str(tmp_path / "data"), "--listen", f"127.0.0.1:{port}")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("tfprof-collector: cannot listen on 127.0.0.1:")
    assert "in use" in lines[0]


def test_a_second_serve_on_the_same_data_dir_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = start_serve(data)
    try:
        second = _serve("--data-dir", str(data), "--listen", "127.0.0.1:0")
        assert second.returncode == 1, second.stdout + second.stderr
        assert "listening on" not in second.stdout
        lines = second.stderr.splitlines()
        assert len(lines) == 1, second.stderr
        assert lines[0].startswith("tfprof-collector: another tfprof-collector serve is using")
        assert first.healthy()
    finally:
        assert first.terminate() == 0
    # The lock goes with the process: the data dir can be served again.
    again = start_serve(data)
    assert again.terminate() == 0


def test_log_lines_carry_our_prefix_and_no_logger_names(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret-token-of-enough-length\n")
    token.chmod(0o600)
    serve = start_serve(tmp_path / "data", "--auth-token-file", str(token))
    assert serve.terminate() == 0
    logged = [ln for ln in serve.lines if not ln.startswith(("listening on ", "metrics on "))]
    assert logged, serve.output()
    for line in logged:
        assert line.startswith("tfprof-collector: "), line
        assert "tfprof.collector." not in line, line
    assert any(ln.startswith("tfprof-collector: warning: bearer tokens") for ln in logged)
