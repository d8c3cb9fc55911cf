"""A real standalone Spark cluster on 127.0.0.1 (one master, workers), from pyspark's own
launch scripts, for the lake's tests; skips cleanly without Java or pyspark."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

INSTALL = "scripts/install_spark.sh installs both"


def spark_home() -> Path:
    """pyspark's directory (its bin/spark-class starts the daemons); skips without it."""
    if shutil.which("java") is None:
        pytest.skip(f"no java on PATH: the Spark test needs a JRE ({INSTALL})")
    try:
        import pyspark
    except ImportError:
        pytest.skip(f"pyspark is not installed ({INSTALL})")
    return Path(pyspark.__file__).parent


@dataclass
class Daemon:
    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def wait_for(self, pattern: str, count: int = 1, timeout: float = 120) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [m for m in (re.search(pattern, ln) for ln in list(self.lines)) if m]
            if len(found) >= count:
                return found[-1]
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"no {pattern!r} from Spark:\n" + "".join(self.lines[-30:]))


def _start(home: Path, env: dict[str, str], *args: str) -> Daemon:
    proc = subprocess.Popen(
        [str(home / "bin" / "spark-class"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    daemon = Daemon(proc)

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            daemon.lines.append(line)

    threading.Thread(target=pump, daemon=True).start()
    return daemon


@contextmanager
def standalone_cluster(workers: int, work_dir: Path) -> Iterator[str]:
    """Start a master and ``workers`` workers (1 core, 512 MB each); yields the master's
    ``spark://`` URL once every worker has registered."""
    home = spark_home()
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_DAEMON_MEMORY": "256m", "SPARK_WORKER_DIR": str(work_dir),
           "SPARK_LOG_DIR": str(work_dir), "SPARK_NO_DAEMONIZE": "1"}  # fmt: skip
    daemons = []
    try:
        master = _start(home, env, "org.apache.spark.deploy.master.Master",
                        "--host", "127.0.0.1", "--port", "0", "--webui-port", "0")  # fmt: skip
        daemons.append(master)
        url = master.wait_for(r"(spark://127\.0\.0\.1:\d+)").group(1)
        for _ in range(workers):
            daemons.append(_start(home, env, "org.apache.spark.deploy.worker.Worker",
                                  "--host", "127.0.0.1", "--cores", "1", "--memory", "512m",
                                  "--webui-port", "0", url))  # fmt: skip
        master.wait_for(r"Registering worker", count=workers)
        yield url
    finally:
        for daemon in reversed(daemons):
            daemon.proc.terminate()
        for daemon in daemons:
            try:
                daemon.proc.wait(30)
            except subprocess.TimeoutExpired:
                daemon.proc.kill()
                daemon.proc.wait()


def wait_for_executors(spark: Any, wanted: int, timeout: float = 120) -> int:
    """Executors registered with ``spark``'s driver (the driver itself not counted)."""
    deadline = time.monotonic() + timeout
    while True:
        executors = int(spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1
        if executors >= wanted or time.monotonic() > deadline:
            return executors
        time.sleep(0.5)
