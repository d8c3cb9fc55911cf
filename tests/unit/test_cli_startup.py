"""What ``tfprof-collector`` loads at start: numpy's OpenBLAS on one thread (no command
calls BLAS; its threads would spin on a core the commands' read-ahead wants) without
changing the environment the user's processes see; and no more modules than the command
that runs reads with (every command's parser is built on every start)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

several_cores = pytest.mark.skipif(
    (os.cpu_count() or 1) < 2, reason="OpenBLAS starts no threads on 1 core"
)
threads_listed = pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="threads listed in /proc"
)

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


@several_cores
@threads_listed
def test_numpy_starts_no_blas_threads_and_the_environment_is_put_back() -> None:
    threads, variable, numpy_loaded = _probe()
    assert (threads, variable, numpy_loaded) == ("1", "None", "True")


@several_cores
@threads_listed
def test_a_users_own_blas_setting_is_kept() -> None:
    threads, variable, numpy_loaded = _probe(OPENBLAS_NUM_THREADS="2")
    assert (threads, variable, numpy_loaded) == ("2", "2", "True")


# Run in a fresh interpreter: ``tfprof-collector ARGV`` (main, stdout kept), then which of
# the modules named (a package: it or any of its modules) it loaded.
LOADED_PROBE = """
import contextlib, io, json, sys
from tfprof.collector.cli import main
out, rc = io.StringIO(), None  # None: argparse exited (--version)
with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
    rc = main(json.loads(sys.argv[1]))
loaded = [m for m in json.loads(sys.argv[2])
          if any(n == m or n.startswith(m + ".") for n in sys.modules)]
print(json.dumps({"rc": rc, "stdout": out.getvalue(), "loaded": loaded}))
"""


def _loaded(argv: list[str], modules: tuple[str, ...]) -> dict[str, Any]:
    args = [json.dumps(argv), json.dumps(modules)]
    run = subprocess.run([sys.executable, "-c", LOADED_PROBE, *args],
                         capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
    found: dict[str, Any] = json.loads(run.stdout.splitlines()[-1])
    return found


def _cli(*argv: str) -> None:
    subprocess.run([sys.executable, "-m", "tfprof.collector.cli", *argv],
                   capture_output=True, text=True, timeout=300, check=True)  # fmt: skip


# Building the parser (``--version``): no SQL engine, no Arrow, no gRPC or protobuf, no
# rich, nothing that reads a store or a lake, no analysis but the list of views' names.
NOT_FOR_THE_PARSER = (
    "duckdb", "pyarrow", "grpc", "google.protobuf", "rich", "tfprof.collector.read",
    "tfprof.collector.lake", "tfprof.collector.store", "tfprof.collector.advice",
    "tfprof.collector.analysis.filters", "tfprof.collector.analysis.view_render",
    "tfprof.collector.service.remote", "tfprof.collector.top.scrape",
)  # fmt: skip

# ``summary --view jobs`` on a compacted data dir: a few lines from one SQL pass, whose
# run time is mostly start-up (bench/results/cpu-read-scale.txt). What it must not load:
# the other commands' stacks (gRPC, advice rules, exports), the other views' analyses,
# the read's sweeps (the jobs view declares none), the data dir's
# store machinery, and rich's progress and table (output piped, no terminal).
NOT_FOR_JOBS = (
    "grpc", "tfprof.collector.service.remote", "tfprof.collector.advice",
    "tfprof.collector.export", "tfprof.collector.merged.streamed",
    "tfprof.collector.analysis.kernels", "tfprof.collector.analysis.api",
    "tfprof.collector.analysis.ops", "tfprof.collector.analysis.step_rows",
    "tfprof.collector.read.gpu_sweeps", "tfprof.collector.read.carried_unions",
    "tfprof.collector.store.datadir", "pyarrow.dataset", "pandas", "rich.progress",
    "rich.table",
)  # fmt: skip


def test_building_the_parser_loads_no_reader() -> None:
    found = _loaded(["--version"], NOT_FOR_THE_PARSER)
    assert found["stdout"].startswith("tfprof-collector ")
    assert found["loaded"] == []


def test_the_jobs_view_loads_only_what_it_reads(tmp_path: Path) -> None:
    trace = Path(__file__).parents[1] / "data" / "traces" / "kineto-hta" / "simple_add.json.gz"
    data = tmp_path / "data"
    _cli("import", "--data-dir", str(data), "--job", "add", str(trace))
    _cli("compact", "--data-dir", str(data))
    argv = ["summary", "--data-dir", str(data), "--view", "jobs", "--format", "json"]
    found = _loaded(argv, NOT_FOR_JOBS)
    assert found["rc"] == 0
    rows = json.loads(found["stdout"])["rows"]
    assert [r["job"] for r in rows] == ["add"] and rows[0]["kernels"] > 0
    assert found["loaded"] == []


def test_the_names_the_parser_offers_are_the_rules_and_views() -> None:
    # Written out or made lazily so that the parser loads no rule or view (above).
    from tfprof.collector.advice import RULE_NAMES
    from tfprof.collector.advice.dist_rules import NAMES
    from tfprof.collector.analysis.view_table import VIEW_NAMES, view
    from tfprof.collector.commands.advise import RULE_CHOICES

    assert RULE_CHOICES == RULE_NAMES + NAMES
    assert [view(name).name for name in VIEW_NAMES] == list(VIEW_NAMES)
