"""The timeline files a user gets from the shipped traces, written with the CLI itself.

Each is made as a user makes it: ``tfprof-agent run`` replaying the demo trace (host
counters included), ``merge`` of real Kineto traces (the host side, launch flows), a
Kineto trace with device-memory events, two jobs that ran at once merged into one file,
four jobs merged and that file merged again, and a multi-rank capture (each rank's own
launcher, all at once, merged). Chrome ``.json.gz`` and Perfetto ``.pftrace`` of each.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
KINETO = REPO / "tests" / "data" / "traces" / "kineto-hta"
TF = REPO / "tests" / "data" / "traces" / "tf-timeline-ikhlestov"
RANKS = 2
TIMEOUT_S = 120

# name: (how it is made, the files it is made from: together they hold what it holds)
ABOUT: dict[str, tuple[str, tuple[str, ...]]] = {
    "demo.json.gz": ("`tfprof-agent run` of the demo (host counters)", ()),
    "demo.run.pftrace": ("`tfprof-agent run -o demo.run.pftrace` of the demo", ()),
    "demo.pftrace": ("`merge demo.json.gz --format perfetto`", ("demo.json.gz",)),
    "demo.merged.json.gz": ("`merge demo.json.gz`", ("demo.json.gz",)),
    "simple_add.json.gz": ("`merge` of Kineto simple_add (host side, flows)", ()),
    "simple_add.pftrace": ("`merge` of Kineto simple_add", ("simple_add.json.gz",)),
    "event_sync.json.gz": ("`merge` of Kineto event_sync_multi_stream", ()),
    "event_sync.pftrace": ("`merge` of Kineto event_sync_multi_stream", ("event_sync.json.gz",)),
    "mem.json.gz": ("`merge` of Kineto simple_add with [memory] events", ()),
    "mem.pftrace": ("`merge` of the same", ("mem.json.gz",)),
    "mem.remerged.pftrace": ("`merge mem.json.gz --format perfetto`", ("mem.json.gz",)),
    "jobs2.json.gz": ("`merge --as jobs` of two runs at once", ("train.json.gz", "eval.json.gz")),
    "jobs2.pftrace": ("the same to Perfetto", ("train.json.gz", "eval.json.gz")),
    "jobs.json.gz": ("`merge --as jobs` of 4 traces (demo run, 2 Kineto, TF)", ()),
    "jobs.pftrace": ("`merge --as jobs` of the same 4", ("jobs.json.gz",)),
    "jobs.remerged.json.gz": ("`merge jobs.json.gz`", ("jobs.json.gz",)),
    "jobs.remerged.pftrace": ("`merge jobs.json.gz --format perfetto`", ("jobs.json.gz",)),
    "ranks.json.gz": (
        f"`merge` of {RANKS} ranks' runs",
        tuple(f"rank{r}.json.gz" for r in range(RANKS)),
    ),
    "ranks.pftrace": ("the same to Perfetto", tuple(f"rank{r}.json.gz" for r in range(RANKS))),
}


def _start(
    args: Sequence[str | Path], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(a) for a in args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait(proc: subprocess.Popen[str]) -> None:
    out, _ = proc.communicate(timeout=TIMEOUT_S)
    if proc.returncode:
        raise RuntimeError(f"{proc.args!r} failed ({proc.returncode}):\n{out}")


def collector(*args: str | Path, cwd: Path) -> None:
    _wait(_start([sys.executable, "-m", "tfprof.collector.cli", *args], cwd))


def agent_run(
    out: Path,
    source: str | Path,
    *,
    job: str,
    env: dict[str, str] | None = None,
    repeat: int = 0,
) -> subprocess.Popen[str]:
    """``tfprof-agent run`` of a short Python job replaying ``source`` to ``out``: as
    fast as it goes, or ``repeat`` times back to back as recorded (a job of a few
    seconds, so that jobs started together overlap). Started: ``_wait`` for it."""
    pace = ["--replay-speed", "1", "--replay-repeat", str(repeat)] if repeat else []
    seconds = 4 if repeat else 0.5  # the job outlives its replay
    return _start(
        [sys.executable, "-m", "tfprof.agent.cli", "run", "--job", job,
         "--source", f"replay:{source}", "--replay-speed", "max", *pace,
         "--host-metrics-interval", "200", "-o", out, "--",
         sys.executable, "-c", f"import time; time.sleep({seconds})"],
        out.parent,
        env,
    )  # fmt: skip


def with_memory(src: Path, dst: Path) -> None:
    """A Kineto trace with CUDA ``[memory]`` instants added, as PyTorch's profiler writes
    them with ``profile_memory=True`` (none of the shipped traces has any): ten
    allocations and releases next to the first kernels, on the API calls' thread."""
    doc: dict[str, Any] = json.loads(gzip.decompress(src.read_bytes()))
    events = doc["traceEvents"]
    kernels = sorted(e["ts"] for e in events if e.get("cat") == "kernel")
    host = next(e for e in events if e.get("cat") == "cuda_runtime")
    total = 0
    for i, ts in enumerate(kernels[:10]):
        size = (1 << (20 + i % 3)) * (-1 if i % 4 == 3 else 1)
        total += size
        args = {"Device Type": 1, "Device Id": 0, "Addr": 4096 * (i + 1), "Bytes": size,
                "Total Allocated": total, "Total Reserved": 1 << 26}  # fmt: skip
        events.append({"ph": "i", "s": "t", "name": "[memory]", "pid": host["pid"],
                       "tid": host["tid"], "ts": ts, "args": args})  # fmt: skip
    dst.write_text(json.dumps(doc))


def make_traces(folder: Path) -> dict[str, Path]:
    """Every file of ``ABOUT`` (and the runs some are made from), written into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    f = folder
    sync, tf = KINETO / "event_sync_multi_stream.json.gz", TF / "GPU_timeline_01.json"
    # Runs at once, as a cluster's would: two jobs sharing the GPU, and the ranks of a
    # distributed job, each rank's own launcher (a replay runs once per launcher)
    # declaring its rank (task r of job "ranks").
    running = [
        agent_run(f / "train.json.gz", sync, job="train", repeat=100),
        agent_run(f / "eval.json.gz", tf, job="eval", repeat=10),
        *(agent_run(f / f"rank{r}.json.gz", sync, job="ranks", env={"RANK": str(r)}, repeat=100)
          for r in range(RANKS)),
    ]  # fmt: skip
    _wait(agent_run(f / "demo.json.gz", "demo", job="demo"))
    _wait(agent_run(f / "demo.run.pftrace", "demo", job="demo"))
    collector("merge", "demo.json.gz", "--format", "perfetto", "-o", "demo.pftrace", cwd=f)
    collector("merge", "demo.json.gz", "-o", "demo.merged.json.gz", cwd=f)
    kineto = {"simple_add": KINETO / "simple_add.json.gz", "event_sync": sync}
    for name, path in kineto.items():
        for suffix in (".json.gz", ".pftrace"):
            collector("merge", path, "-o", name + suffix, cwd=f)
    with_memory(kineto["simple_add"], f / "memory.json")
    for suffix in (".json.gz", ".pftrace"):
        collector("merge", "memory.json", "-o", "mem" + suffix, cwd=f)
    collector("merge", "mem.json.gz", "-o", "mem.remerged.pftrace", cwd=f)
    four: list[str | Path] = ["demo.json.gz", *kineto.values(), tf]
    for suffix in (".json.gz", ".pftrace"):
        collector("merge", "--as", "jobs", *four, "-o", "jobs" + suffix, cwd=f)
        collector("merge", "jobs.json.gz", "-o", "jobs.remerged" + suffix, cwd=f)
    for proc in running:
        _wait(proc)
    ranks = [f"rank{r}.json.gz" for r in range(RANKS)]
    for suffix in (".json.gz", ".pftrace"):
        collector("merge", "--as", "jobs", "train.json.gz", "eval.json.gz", "-o", "jobs2" + suffix,
                  cwd=f)  # fmt: skip
        collector("merge", *ranks, "-o", "ranks" + suffix, cwd=f)
    return {name: f / name for name in ABOUT}
