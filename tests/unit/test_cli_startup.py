"""``tfprof-collector`` starts numpy's OpenBLAS on one thread (no command calls BLAS;
its threads would spin on a core the commands' read-ahead wants) without changing the
environment the user's processes see."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="OpenBLAS starts no threads on 1 core"),
    pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="threads listed in /proc"),
]

# ``--version``: the parser (every command's module, numpy among them) is built and no
# command runs. OpenBLAS's threads carry the process's name; Arrow's allocator starts
# one of its own name (jemalloc_bg_thd).
PROBE = """
import contextlib, io, os, sys
from tfprof.collector.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main(["--version"])
names = [open(f"/proc/self/task/{t}/comm").read() for t in os.listdir("/proc/self/task")]
blas = os.environ.get("OPENBLAS_NUM_THREADS")
print(names.count(open("/proc/self/comm").read()), blas, "numpy" in sys.modules)
"""


def _probe(**env: str) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"} | env
    run = subprocess.run([sys.executable, "-c", PROBE], env=environ,
                         capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    return run.stdout.split()[-3:]


def test_numpy_starts_no_blas_threads_and_the_environment_is_put_back() -> None:
    threads, variable, numpy_loaded = _probe()
    assert (threads, variable, numpy_loaded) == ("1", "None", "True")


def test_a_users_own_blas_setting_is_kept() -> None:
    threads, variable, numpy_loaded = _probe(OPENBLAS_NUM_THREADS="2")
    assert (threads, variable, numpy_loaded) == ("2", "2", "True")
