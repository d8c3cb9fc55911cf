"""The agent as a training image installs it: without the collector or its dependencies.

A training image gets ``pip install ./proto ./agent`` only. These runs make the
collector's third-party dependencies (or the collector itself) unimportable in the
launcher and in every process of the job, and check that tracing still works end to end
against a collector elsewhere, and that embedded mode says in one line what to do.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from tfprof.collector.store import Store

from .conftest import agent_cmd, clean_env, start_collector

# What only the collector needs (numpy, orjson, perfetto, prometheus_client, rich).
COLLECTOR_ONLY = ("numpy", "orjson", "perfetto", "prometheus_client", "rich")
TRACE = "kineto-hta/simple_add.json.gz"
REPEAT = 40


def unimportable(folder: Path, names: tuple[str, ...]) -> str:
    """A folder of stand-ins that fail to import, for the front of PYTHONPATH.

    Stand-in modules rather than a meta-path finder installed by a sitecustomize: the
    job's processes run tfprof's bootstrap sitecustomize, which starts the hook before
    it chains to any other, so a finder would come too late to cover the hook.
    """
    folder.mkdir()
    for name in names:
        (folder / f"{name}.py").write_text(
            f"raise ImportError('{name} is blocked: the agent must run without it', "
            f"name='{name}')\n"
        )
    return str(folder)


JOB = textwrap.dedent(
    f"""
    import importlib.util, os, sys
    blocked = {COLLECTOR_ONLY!r}
    # Every blocked name resolves to its failing stand-in (checked by where it is found, not
    # by importing it here: the replay thread may be inside its optional `import numpy`).
    for name in blocked:
        origin = importlib.util.find_spec(name).origin
        if os.path.basename(os.path.dirname(origin)) != "blocked":
            sys.exit(f"{{name}} is importable from {{origin}}: the test set-up is broken")
    print("job done")
    """
)


def test_a_replay_reaches_a_collector_without_the_collectors_dependencies(
    traces: Path, tmp_path: Path
) -> None:
    from tfprof.readers import load_trace

    expected = len(load_trace(traces / TRACE)) * REPEAT
    collector = start_collector(tmp_path / "data")
    cmd = agent_cmd(
        "run", "--collector", collector.address, "--job", "alone",
        "--source", f"replay:{traces / TRACE}", "--replay-speed", "max",
        "--replay-repeat", str(REPEAT), "--spool-dir", str(tmp_path / "spool"),
        "--exit-timeout", "120", "--", sys.executable, "-c", JOB,
    )  # fmt: skip
    try:
        run = subprocess.run(
            cmd,
            env=clean_env(PYTHONPATH=unimportable(tmp_path / "blocked", COLLECTOR_ONLY)),
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
    finally:
        assert collector.stop() == 0
    assert run.returncode == 0, run.stderr
    assert run.stdout == "job done\n"
    assert "Traceback" not in run.stderr, run.stderr
    (job,) = Store(tmp_path / "data").load_jobs(["alone"])
    replayed = [s for s in job.streams if s.num_records]
    assert len(replayed) == 1 and replayed[0].finished
    keys = np.stack([replayed[0].records[c] for c in ("start_ns", "stream", "correlation")], 1)
    assert len(keys) == expected, f"{len(keys)} records stored, {expected} replayed"
    assert len(np.unique(keys, axis=0)) == expected, "duplicated records"


NO_COLLECTOR = textwrap.dedent(
    """
    import sys

    class NoCollector:
        # The agent's own distribution alone: tfprof.collector is not installed.
        def find_spec(self, name, path=None, target=None):
            if name == "tfprof.collector" or name.startswith("tfprof.collector."):
                raise ImportError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoCollector())
    from tfprof.agent.cli import entry

    sys.argv[0] = "tfprof-agent"
    entry()
    """
)


def test_embedded_mode_without_a_collector_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    marker = tmp_path / "job-ran"
    job = f"open({str(marker)!r}, 'w').close()"
    run = subprocess.run(
        [sys.executable, "-c", NO_COLLECTOR, "run", "--", sys.executable, "-c", job],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode == 2, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfprof: "), run.stderr
    assert "--collector" in lines[0]
    assert not marker.exists(), "the job must not start without a collector"
