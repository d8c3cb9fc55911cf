"""A launcher whose spool sits on a full disk, with real processes: the end-of-run line
says what really waits, the rest is counted, and flush-spool delivers exactly that."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tmpfs import small_tmpfs
from tfprof.collector.store import Store

from .conftest import agent_cmd, clean_env, start_collector
from .delivery_replay import TRACE, expected_records

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 256 KiB tmpfs; skipped where mounting is not permitted."""
    with small_tmpfs(tmp_path / "small", "256k") as mnt:
        yield mnt


def test_a_spool_on_a_full_disk_stores_or_counts_every_record(
    traces: Path, tmp_path: Path, small_disk: Path
) -> None:
    with socket.socket() as s:  # a port nothing listens on, that we can start on later
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    spool = small_disk / "spool"
    cmd = agent_cmd(
        "run", "--collector", address, "--job", "fulldisk",
        "--source", f"replay:{traces / TRACE}", "--replay-speed", "max",
        "--replay-repeat", "1000", "--host-metrics-interval", "0",
        "--spool-dir", str(spool), "--exit-timeout", "120",
        "--", sys.executable, "-c", "print('job done')",
    )  # fmt: skip
    job = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=240)
    assert job.returncode == 0, job.stderr
    assert job.stdout == "job done\n"
    waiting = re.search(r"([\d,]+) records of \d+ process\(es\) not delivered", job.stderr)
    assert waiting is not None, job.stderr
    said = int(waiting.group(1).replace(",", ""))

    data = tmp_path / "data"
    collector = start_collector(data, listen=address)
    try:
        flush = subprocess.run(
            agent_cmd("flush-spool", "--spool-dir", str(spool)),
            env=clean_env(), capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert flush.returncode == 0, flush.stderr
    finally:
        assert collector.stop() == 0
    (run,) = Store(data).load_jobs(["fulldisk"])
    sent = expected_records(traces)
    assert 0 < run.num_records < sent
    assert run.num_records == said  # what the end-of-run line said waits
    assert run.num_records + run.dropped.total == sent  # the rest is counted
    assert not list(spool.glob("*/*/*/*/batches.log"))  # delivered, then removed
