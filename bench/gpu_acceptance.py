"""GPU acceptance: trace a known CuPy workload with `tfprof-agent run` and check the counts.

The workload launches kernels on two streams, pinned and pageable host<->device copies
and memsets, and knows exactly how many of each it issued. This script runs it once
untraced and once under ``tfprof-agent run --source cupti`` (embedded collector), reads
the trace, compares the traced counts with the launched ones and prints the overhead.
Exit status 0 when every count matches. Needs a CUDA GPU and CuPy.

    python bench/gpu_acceptance.py [--iterations N] [--kernels K] [--json OUT]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

KERNEL_SOURCE = r"""
extern "C" __global__ void tfprof_accept_scale(float* x, int n, float a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * a + 1.0f;
}
extern "C" __global__ void tfprof_accept_shift(float* x, int n, float b) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] - b;
}
"""


def workload(iterations: int, kernels: int, n: int) -> dict[str, Any]:
    """Issue a known set of GPU operations; return what was issued."""
    import cupy as cp
    import numpy as np

    module = cp.RawModule(code=KERNEL_SOURCE)
    scale = module.get_function("tfprof_accept_scale")
    shift = module.get_function("tfprof_accept_shift")
    nbytes = n * 4
    streams = [cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)]
    dev = [cp.empty(n, dtype=cp.float32) for _ in streams]
    pinned_mem = cp.cuda.alloc_pinned_memory(nbytes)
    pinned = np.frombuffer(pinned_mem, dtype=np.float32, count=n)
    pinned[:] = 1.0
    pageable = np.ones(n, dtype=np.float32)
    block = 256
    grid = (n + block - 1) // block
    rt = cp.cuda.runtime
    cp.cuda.Device().synchronize()

    t0 = time.perf_counter()
    for _ in range(iterations):
        # stream 0: pinned copies (truly asynchronous), stream 1: pageable copies
        s0, s1 = streams
        rt.memcpyAsync(dev[0].data.ptr, pinned.ctypes.data, nbytes, rt.memcpyHostToDevice, s0.ptr)
        rt.memcpyAsync(dev[1].data.ptr, pageable.ctypes.data, nbytes, rt.memcpyHostToDevice, s1.ptr)
        for k in range(kernels):
            with s0:
                scale((grid,), (block,), (dev[0], np.int32(n), np.float32(1.0001)))
            with s1:
                shift((grid,), (block,), (dev[1], np.int32(n), np.float32(k)))
        rt.memsetAsync(dev[1].data.ptr, 0, nbytes, s1.ptr)
        rt.memcpyAsync(pinned.ctypes.data, dev[0].data.ptr, nbytes, rt.memcpyDeviceToHost, s0.ptr)
        rt.memcpyAsync(pageable.ctypes.data, dev[1].data.ptr, nbytes, rt.memcpyDeviceToHost, s1.ptr)
    for s in streams:
        s.synchronize()
    elapsed = time.perf_counter() - t0
    return {
        "elapsed_s": elapsed,
        "streams": [int(s.ptr) for s in streams],
        "expected": {
            "tfprof_accept_scale": iterations * kernels,
            "tfprof_accept_shift": iterations * kernels,
            "HtoD pinned": iterations,
            "HtoD pageable": iterations,
            "DtoH pinned": iterations,
            "DtoH pageable": iterations,
            "memset": iterations,
        },
        "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
    }


def traced_counts(trace: dict[str, Any]) -> tuple[Counter[str], dict[str, set[str]]]:
    names = {
        e["pid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    counts: Counter[str] = Counter()
    tracks: dict[str, set[str]] = {}
    for e in trace["traceEvents"]:
        if e.get("ph") != "X":
            continue
        track = names.get(e["pid"], "?")
        args = e.get("args", {})
        if e.get("cat") == "kernel" and e["name"].startswith("tfprof_accept_"):
            counts[e["name"]] += 1
            tracks.setdefault(e["name"], set()).add(track)
        elif e.get("cat") == "memcpy" and track.endswith("/memcpy"):
            host_side = args.get("src kind") if args.get("kind") == "HtoD" else args.get("dst kind")
            counts[f"{args.get('kind')} {host_side}"] += 1
        elif e.get("cat") == "memset":
            counts["memset"] += 1
    return counts, tracks


def run_workload(args: argparse.Namespace, traced: bool, out: Path) -> tuple[dict[str, Any], str]:
    cmd = [sys.executable, __file__, "--workload", "--iterations", str(args.iterations),
           "--kernels", str(args.kernels), "--n", str(args.n)]  # fmt: skip
    if traced:
        agent = [sys.executable, "-m", "tfprof.agent.cli", "run", "--source", "cupti",
                 "--job", "gpu-acceptance", "-o", str(out), "--"]  # fmt: skip
        cmd = agent + cmd
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"workload failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    result_line = [line for line in proc.stdout.splitlines() if line.startswith("{")][-1]
    return json.loads(result_line), proc.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--kernels", type=int, default=8, help="kernels per stream per iteration")
    parser.add_argument("--n", type=int, default=1 << 20, help="floats per buffer")
    parser.add_argument("--rounds", type=int, default=3, help="untraced/traced pairs for overhead")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--workload", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.workload:
        print(json.dumps(workload(args.iterations, args.kernels, args.n)), flush=True)
        return 0

    with tempfile.TemporaryDirectory(prefix="tfprof-accept-") as tmp:
        trace_path = Path(tmp) / "accept.trace.json.gz"
        plain_times, traced_times = [], []
        traced: dict[str, Any] = {}
        stderr = ""
        for _ in range(args.rounds):
            plain, _ = run_workload(args, False, trace_path)
            traced, stderr = run_workload(args, True, trace_path)
            plain_times.append(plain["elapsed_s"])
            traced_times.append(traced["elapsed_s"])
        with gzip.open(trace_path, "rt") as f:
            trace = json.load(f)
    counts, tracks = traced_counts(trace)
    expected = traced["expected"]
    ok = True
    print(f"device: {traced['device']}; tfprof summary:\n{stderr.strip()}\n")
    print(f"{'operation':<22}{'launched':>10}{'traced':>10}")
    for key, want in expected.items():
        got = counts.get(key, 0)
        ok &= got == want
        print(f"{key:<22}{want:>10}{got:>10}{'' if got == want else '   MISMATCH'}")
    separate = tracks.get("tfprof_accept_scale", set()) != tracks.get("tfprof_accept_shift", set())
    print(f"kernels of the two streams on separate stream tracks: {separate}")
    ok &= separate
    dropped = sum(j["dropped"]["total"] for j in trace["otherData"]["jobs"])
    print(f"dropped records: {dropped}")
    ok &= dropped == 0
    plain_med = sorted(plain_times)[len(plain_times) // 2]
    traced_med = sorted(traced_times)[len(traced_times) // 2]
    print(
        f"workload time untraced {plain_med * 1e3:.1f} ms, traced {traced_med * 1e3:.1f} ms "
        f"(median of {args.rounds}): overhead ratio {traced_med / plain_med:.3f}"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "device": traced["device"],
                    "expected": expected,
                    "traced": dict(counts),
                    "dropped": dropped,
                    "untraced_s": plain_times,
                    "traced_s": traced_times,
                    "ok": ok,
                    "host": os.uname().nodename,
                },
                indent=2,
            )
        )
    print("ACCEPTED" if ok else "NOT ACCEPTED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
