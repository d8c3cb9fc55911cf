"""How much replayed GPU time the code view gives to a user's own Python frame.

Each real Kineto trace recorded ``with_stack=True`` (by default the three TraceLens traces
in tests/data/traces/tracelens/: BERT and Qwen on an H100, a normalisation layer's
forward and backward on an MI300X) is replayed by a real job under ``tfprof-agent run
--source replay:TRACE --code sample`` into a real ``tfprof-collector serve``; the code
view's attribution (collector/analysis/code_read.py, SQL over the stored lake) is read
back, and the GPU time (kernels, copies, memsets) is split into:

- with a stack: its launch has a Python stack at all (exact or nearest sample);
- with a user frame: that stack holds a frame of the user's code, i.e. outside the
  Python standard library (``sys.stdlib_module_names``), outside the frameworks named by
  ``--libraries`` (torch, transformers, ...), and not a pseudo-frame (``<built-in ...>``,
  ``nn.Module: ...``, ``<string>``, ``(gradient)``);
- the same with model code as user code (``--libraries`` without transformers).

Also printed: the innermost user frame that got the most GPU time.

    .venv/bin/python bench/code_share.py [TRACE ...] [--libraries torch,transformers,...]

Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRACES = sorted((REPO / "tests/data/traces/tracelens").glob("*.json.gz"))
LIBRARIES = "torch,transformers,numpy,triton,vllm,flashinfer,tqdm,sglang,accelerate"
MODEL_CODE = "transformers"  # counted as user code in the second share
PSEUDO = re.compile(r"^(<built-in|nn\.Module: |<string>|<frozen|<autograd>|\(no Python)")


def is_user(name: str, libraries: frozenset[str]) -> bool:
    if PSEUDO.match(name):
        return False
    path = name.split(":", 1)[0]
    top = re.split(r"[/\\.]", path.lstrip("/"), maxsplit=1)[0]
    if "site-packages/" in path or "/lib/python3" in path:  # a live stack's library path
        return False
    return top not in libraries and top not in sys.stdlib_module_names


def serve(data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfprof.collector.cli", "serve", "--data-dir", str(data_dir),
         "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("listening on "):
            return proc, line.split()[2]
    raise SystemExit(f"collector did not start: {proc.wait()}")


def replay(address: str, trace: Path, job: str) -> float:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tfprof.agent.cli", "run", "--collector", address, "--job",
         job, "--code", "sample", "--source", f"replay:{trace}", "--replay-speed", "max",
         "--", sys.executable, "-c", "import time; time.sleep(2)"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if done.returncode:
        raise SystemExit(f"replay of {trace.name} failed: {done.stderr}")
    return time.monotonic() - started


def shares(data_dir: Path, job: str, libraries: frozenset[str]) -> dict[str, object]:
    from tfprof.collector.analysis.code_read import read
    from tfprof.collector.analysis.code_sql import Scope
    from tfprof.collector.analysis.code_tree import GPU_NS
    from tfprof.collector.lake.query import Engine

    con = Engine([str(data_dir)]).connect()
    try:
        att = read(con, Scope((job,)))
    finally:
        con.close()
    model = libraries - {MODEL_CODE}
    total = stacked = user = user_model = 0.0
    innermost: dict[str, float] = {}
    for leaf in att.leaves:
        ns = leaf.values[GPU_NS]
        if not ns:
            continue  # a host-time leaf
        total += ns
        if leaf.path:
            stacked += ns
        mine = [f for f in leaf.path if is_user(f, libraries)]
        if mine:
            user += ns
            innermost[mine[-1]] = innermost.get(mine[-1], 0.0) + ns
        if any(is_user(f, model) for f in leaf.path):
            user_model += ns
    top = max(innermost.items(), key=lambda kv: kv[1], default=("-", 0.0))
    return {"gpu_us": total / 1e3, "stacked": stacked / total if total else 0.0,
            "user": user / total if total else 0.0,
            "user_model": user_model / total if total else 0.0,
            "top": top[0], "top_share": top[1] / total if total else 0.0}  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("traces", nargs="*", type=Path, default=TRACES, metavar="TRACE")
    p.add_argument(
        "--libraries",
        default=LIBRARIES,
        help=f"top-level packages that are not user code (default: {LIBRARIES})",
    )
    args = p.parse_args()
    libraries = frozenset(x for x in args.libraries.split(",") if x)
    print(
        f"# bench/code_share.py: replayed GPU time attributed to a user frame; "
        f"libraries: stdlib, {','.join(sorted(libraries))}; {os.cpu_count()} CPUs"
    )
    print(
        f"{'trace':<58} {'GPU us':>10} {'stack':>7} {'user':>7} {'user+model':>10}  "
        f"innermost user frame with most GPU time"
    )
    with tempfile.TemporaryDirectory(prefix="code-share-") as tmp:
        data = Path(tmp) / "data"
        proc, address = serve(data)
        try:
            for i, trace in enumerate(args.traces):
                replay(address, trace, f"t{i}")
        finally:
            proc.terminate()
            proc.wait(60)
        weighted = {"gpu_us": 0.0, "user": 0.0, "stacked": 0.0, "user_model": 0.0}
        for i, trace in enumerate(args.traces):
            s = shares(data, f"t{i}", libraries)
            print(f"{trace.name[:58]:<58} {s['gpu_us']:>10,.1f} {s['stacked']:>7.1%} "
                  f"{s['user']:>7.1%} {s['user_model']:>10.1%}  {s['top']} "
                  f"({s['top_share']:.1%})")  # fmt: skip
            for k in ("user", "stacked", "user_model"):
                weighted[k] += float(s[k]) * float(s["gpu_us"])  # type: ignore[arg-type]
            weighted["gpu_us"] += float(s["gpu_us"])  # type: ignore[arg-type]
        g = weighted["gpu_us"]
        print(
            f"{'all (GPU-time weighted)':<58} {g:>10,.1f} {weighted['stacked'] / g:>7.1%} "
            f"{weighted['user'] / g:>7.1%} {weighted['user_model'] / g:>10.1%}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
