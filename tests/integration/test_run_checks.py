"""`tfprof-agent run` checks what it can before the job starts, and never loses records
it could not write: real launcher processes, real files, a real collector."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import Collector, agent_cmd, clean_env, start_collector

PRINT_RAN = [sys.executable, "-c", "open('ran', 'w').write('yes')"]


def run_agent(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(
        agent_cmd("run", *args), env=env or clean_env(), capture_output=True, text=True,
        timeout=timeout, cwd=tmp_path,
    )  # fmt: skip


def one_line(run: subprocess.CompletedProcess[str]) -> str:
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("tfprof: "), run.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("output", "says"),
    [
        ("/nonexistent/dir/t.json", "does not exist"),
        ("t.txt", "suffixes: .json.gz"),
    ],
)
def test_a_bad_output_fails_before_the_job_runs(tmp_path: Path, output: str, says: str) -> None:
    run = run_agent(tmp_path, "--source", "none", "-o", output, "--", *PRINT_RAN)
    assert run.returncode == 2
    assert says in one_line(run) and "--output" in run.stderr
    assert not (tmp_path / "ran").exists(), "the job ran although its trace could not be kept"


def test_an_unwritable_output_directory_fails_before_the_job_runs(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    run = run_agent(tmp_path, "--source", "none", "-o", str(locked / "t.json"), "--", *PRINT_RAN)
    assert run.returncode == 2 and "not writable" in one_line(run)


def test_a_failed_write_keeps_the_records_and_says_how_to_write_them(tmp_path: Path) -> None:
    # The output's directory disappears while the job runs: the write fails at the end.
    out_dir = tmp_path / "gone"
    out_dir.mkdir()
    script = f"import shutil; shutil.rmtree({str(out_dir)!r}); print('done')"
    out = out_dir / "t.json"
    run = run_agent(tmp_path, "--source", "none", "--host-metrics-interval", "50",
                    "-o", str(out), "--", sys.executable, "-c", script)  # fmt: skip
    assert run.returncode == 0 and run.stdout == "done\n", run.stderr
    (hint,) = [line for line in run.stderr.splitlines() if "tfprof-collector export" in line]
    command = hint.split("`")[1].split()
    data_dir = Path(command[command.index("--data-dir") + 1])
    try:
        assert data_dir.is_dir(), "the records were deleted"
        again = tmp_path / "again.json"
        export = subprocess.run(
            [sys.executable, "-m", "tfprof.collector.cli", "export", "--data-dir",
             str(data_dir), "-o", str(again)],
            env=clean_env(), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert export.returncode == 0, export.stderr
        assert again.stat().st_size > 0
    finally:
        import shutil

        shutil.rmtree(data_dir.parent, ignore_errors=True)


def test_runs_in_the_same_second_never_share_a_trace_file(tmp_path: Path) -> None:
    script = "print('ok')"
    procs = [
        subprocess.Popen(
            agent_cmd("run", "--source", "none", "--", sys.executable, "-c", script),
            env=clean_env(),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    written = set()
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        (line,) = [x for x in err.splitlines() if "trace written to" in x]
        written.add(line.split("trace written to ")[1].split()[0])
    assert len(written) == 4
    assert {str(p) for p in tmp_path.glob("tfprof-*.trace.json.gz")} == written


def test_a_default_name_never_replaces_a_file_an_explicit_one_does(tmp_path: Path) -> None:
    first = run_agent(tmp_path, "--job", "same", "--source", "none", "--", "true")
    second = run_agent(tmp_path, "--job", "same", "--source", "none", "--", "true")
    assert first.returncode == second.returncode == 0, second.stderr
    assert sorted(p.name for p in tmp_path.glob("tfprof-same*")) == [
        "tfprof-same-2.trace.json.gz",
        "tfprof-same.trace.json.gz",
    ]
    explicit = tmp_path / "mine.json"
    explicit.write_text("old")
    run = run_agent(tmp_path, "--source", "none", "-o", str(explicit), "--", "true")
    assert run.returncode == 0, run.stderr
    assert "replaced" in run.stderr and explicit.read_text() != "old"


def test_remote_run_says_where_the_job_went(tmp_path: Path) -> None:
    collector: Collector = start_collector(tmp_path / "data")
    try:
        run = run_agent(tmp_path, "--collector", collector.address, "--job", "remote",
                        "--source", "none", "--spool-dir", str(tmp_path / "spool"),
                        "--", "true")  # fmt: skip
    finally:
        assert collector.stop() == 0
    assert run.returncode == 0, run.stderr
    assert "job remote (run " in run.stderr
    assert "0 spooled, 0 dropped" in run.stderr
    assert f"tfprof-collector export --collector {collector.address} --job remote" in run.stderr
    assert "tfprof-collector summary" in run.stderr


def test_a_file_that_is_not_a_trace_fails_before_the_job_runs(tmp_path: Path) -> None:
    for name, data in (("notes.txt", b"hello"), ("z.json.gz", gzip.compress(b"hello"))):
        (tmp_path / name).write_bytes(data)
        run = run_agent(tmp_path, "--source", f"replay:{tmp_path / name}", "--", *PRINT_RAN)
        assert run.returncode == 2
        assert "not a trace" in one_line(run)
        assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("http://127.0.0.1:50051", "without a scheme"),
        ("grpc://127.0.0.1:50051", "without a scheme"),
        ("127.0.0.1:70000", "out of range"),
        ("127.0.0.1", "expected HOST:PORT"),
        ("no-such-host.invalid:50051", "cannot resolve"),
    ],
)
def test_bad_collector_addresses_are_one_line_naming_the_flag(
    tmp_path: Path, address: str, says: str
) -> None:
    run = run_agent(tmp_path, "--collector", address, "--source", "none", "--", *PRINT_RAN)
    assert run.returncode == 2
    line = one_line(run)
    assert line.startswith(f"tfprof: --collector {address}") and says in line
    assert not (tmp_path / "ran").exists()


def test_a_closed_port_is_one_plain_line(tmp_path: Path) -> None:
    run = run_agent(tmp_path, "--collector", "127.0.0.1:1", "--source", "none",
                    "--spool-dir", str(tmp_path / "spool"), "--", "true")  # fmt: skip
    assert run.returncode == 0
    (line,) = [x for x in run.stderr.splitlines() if "cannot deliver" in x]
    assert "connection refused" in line and "UNAVAILABLE" not in line


def test_tls_to_a_plaintext_collector_prints_no_grpc_log_lines(tmp_path: Path) -> None:
    from tests.unit.tls_certs import make_cert

    cert, _ = make_cert(tmp_path)
    collector = start_collector(tmp_path / "data")
    script = "import os; print(os.environ.get('GRPC_VERBOSITY', 'unset'))"
    try:
        run = run_agent(tmp_path, "--collector", collector.address, "--tls-ca", str(cert),
                        "--source", "none", "--spool-dir", str(tmp_path / "spool"),
                        "--", sys.executable, "-c", script)  # fmt: skip
    finally:
        assert collector.stop() == 0
    assert run.returncode == 0
    assert run.stdout == "unset\n", "the job's environment was changed"
    assert all(line.startswith("tfprof: ") for line in run.stderr.splitlines()), run.stderr
    assert "TLS handshake failed" in run.stderr


def test_command_not_found_comes_before_any_notice(tmp_path: Path) -> None:
    # auto: on a machine without a driver the launcher would say so; not before this.
    run = run_agent(tmp_path, "--", "no-such-command-tfprof")
    assert run.returncode == 127
    assert one_line(run) == "tfprof: command not found: no-such-command-tfprof"
    script = tmp_path / "not-executable.sh"
    script.write_text("#!/bin/sh\n")
    run = run_agent(tmp_path, "--", str(script))
    assert run.returncode == 126
    assert one_line(run) == f"tfprof: permission denied: {script}"


def test_a_missing_script_fails_before_the_job_runs_and_writes_nothing(tmp_path: Path) -> None:
    run = run_agent(tmp_path, "--", sys.executable, "nosuchscript.py")
    assert run.returncode == 2
    name = os.path.basename(sys.executable)
    assert one_line(run) == (
        f"tfprof: {name}: can't open file 'nosuchscript.py': no such file (nothing was started)"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("command", "status"),
    [
        (["sh", "-c", f"exec {sys.executable} nosuchscript.py"], 2),
        (["sh", "-c", "no-such-command-tfprof"], 127),
        ([sys.executable, "-c", "import sys; sys.exit(2)"], 2),
    ],
)
def test_a_job_that_failed_to_start_gets_one_line_and_no_trace(
    tmp_path: Path, command: list[str], status: int
) -> None:
    run = run_agent(tmp_path, "--source", "none", "--", *command)
    assert run.returncode == status
    ours = [line for line in run.stderr.splitlines() if line.startswith("tfprof:")]
    assert len(ours) == 1, run.stderr
    assert ours[0].startswith("tfprof: the job failed to start: ")
    assert f"exited with status {status} after " in ours[0]
    assert list(tmp_path.iterdir()) == []  # no trace, no summary


def test_a_short_job_that_ran_and_failed_keeps_its_summary_and_trace(tmp_path: Path) -> None:
    run = run_agent(tmp_path, "--source", "none", "-o", "t.json", "--",
                    sys.executable, "-c", "import sys; sys.exit(1)")  # fmt: skip
    assert run.returncode == 1
    assert "failed to start" not in run.stderr
    assert "tfprof: trace written to" in run.stderr and (tmp_path / "t.json").exists()


def test_a_remote_job_that_failed_to_start_says_so_instead_of_the_report(tmp_path: Path) -> None:
    collector: Collector = start_collector(tmp_path / "data")
    try:
        run = run_agent(tmp_path, "--collector", collector.address, "--source", "none",
                        "--spool-dir", str(tmp_path / "spool"),
                        "--", "sh", "-c", "exit 127")  # fmt: skip
    finally:
        assert collector.stop() == 0
    assert run.returncode == 127
    ours = [line for line in run.stderr.splitlines() if line.startswith("tfprof:")]
    assert len(ours) == 1 and "the job failed to start" in ours[0], run.stderr
