"""GPU acceptance: trace a known CuPy workload with `tfprof-agent run` and check the counts.

The workload launches kernels on two streams, pinned and pageable host<->device copies
and memsets, one NVTX range per iteration, and knows exactly how many of each it issued
and how much device memory its pool took. This script runs it untraced and under
``tfprof-agent run --source cupti --collector ADDR`` (a standalone collector on
127.0.0.1:0), exports the trace with ``tfprof-collector export``, compares the traced
counts with the launched ones and prints the overhead. The host side is checked on the
stored records themselves: one launch API record per kernel launched, every kernel,
copy and memset with an API partner by correlation id, the NVTX ranges with their name,
and the MEMORY2 peak (allocations minus releases over time) equal to the pool's bytes.
Exit status 0 when every check passes. Needs a CUDA GPU and CuPy; without them it says
so in one line and exits 2.

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
    nvtx = cp.cuda.nvtx
    cp.cuda.Device().synchronize()

    t0 = time.perf_counter()
    for _ in range(iterations):
        nvtx.RangePush(NVTX_RANGE)
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
        nvtx.RangePop()
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
        # What CuPy's pool took from cudaMalloc: the device memory the job held at peak.
        "pool_bytes": int(cp.get_default_memory_pool().total_bytes()),
    }


NVTX_RANGE = "tfprof_accept_iteration"
LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC")


def host_side_checks(data_dir: str, job: str, expected: dict[str, Any], pool_bytes: int,
                     iterations: int) -> list[tuple[str, Any, Any]]:  # fmt: skip
    """(check, wanted, got) for the host side, from the stored records of ``job``."""
    import numpy as np

    from tfprof.collector.store import Store
    from tfprof.core.records import RecordKind

    checks: list[tuple[str, Any, Any]] = []
    (job_data,) = Store(data_dir).load_jobs([job])
    stream = max(job_data.streams, key=lambda s: s.num_records)  # the workload process
    rec, names = stream.records, stream.strings
    kind, corr = rec["kind"], rec["correlation"]
    name_of = np.array(names, dtype=object)[rec["name"]]
    api = kind == RecordKind.API
    launches = api & np.isin(name_of, LAUNCH_CALLS)
    ours = (kind == RecordKind.KERNEL) & np.char.startswith(name_of.astype(str), "tfprof_accept_")
    launched = expected["tfprof_accept_scale"] + expected["tfprof_accept_shift"]
    ours_launched = int(np.isin(corr[launches], corr[ours]).sum())
    checks.append(("launch API records of our kernels", launched, ours_launched))
    gpu = np.isin(kind, (RecordKind.KERNEL, RecordKind.MEMCPY, RecordKind.MEMSET))
    partnered = int(np.isin(corr[gpu], corr[api]).sum())
    checks.append(("GPU records with an API partner", int(gpu.sum()), partnered))
    ranges = (kind == RecordKind.MARKER) & (name_of == NVTX_RANGE)
    checks.append((f"NVTX ranges {NVTX_RANGE}", iterations, int(ranges.sum())))
    checks.append(
        ("NVTX ranges with a duration", iterations, int((rec["duration_ns"][ranges] > 0).sum()))
    )
    # cudaMalloc'd device memory (CUpti_ActivityMemoryKind DEVICE), not module statics.
    memory = (kind == RecordKind.MEMORY) & (rec["src_kind"] == 3)
    order = np.argsort(rec["start_ns"][memory], kind="stable")
    sign = np.where(rec["memory_op"][memory] == 1, 1, -1)
    held = np.cumsum((sign * rec["bytes"][memory])[order])
    peak = int(held.max()) if len(held) else 0
    checks.append(("MEMORY2 peak bytes = pool bytes", pool_bytes, peak))
    return checks


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


def run_workload(
    args: argparse.Namespace, collector: str = "", job: str = ""
) -> tuple[dict[str, Any], str]:
    """The workload, untraced, or traced into ``collector`` as ``job``."""
    cmd = [sys.executable, __file__, "--workload", "--iterations", str(args.iterations),
           "--kernels", str(args.kernels), "--n", str(args.n)]  # fmt: skip
    if collector:
        agent = [sys.executable, "-m", "tfprof.agent.cli", "run", "--source", "cupti",
                 "--collector", collector, "--job", job, "--"]  # fmt: skip
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

    try:
        import cupy  # noqa: F401
    except ImportError as exc:
        print(f"gpu_acceptance: needs CuPy and a CUDA GPU ({exc})", file=sys.stderr)
        return 2
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.throughput import start_collector, stop_process

    with tempfile.TemporaryDirectory(prefix="tfprof-accept-") as tmp:
        trace_path = Path(tmp) / "accept.trace.json.gz"
        data_dir = str(Path(tmp) / "data")
        collector, address = start_collector(data_dir, str(Path(tmp) / "collector.log"))
        plain_times, traced_times = [], []
        traced: dict[str, Any] = {}
        stderr = ""
        try:
            for i in range(args.rounds):
                plain, _ = run_workload(args)
                job = f"gpu-acceptance-{i}"
                traced, stderr = run_workload(args, address, job)
                plain_times.append(plain["elapsed_s"])
                traced_times.append(traced["elapsed_s"])
        finally:
            stop_process(collector)
        export = [sys.executable, "-m", "tfprof.collector.cli", "export", "--data-dir",
                  data_dir, "--job", job, "-o", str(trace_path)]  # fmt: skip
        subprocess.run(export, check=True, capture_output=True, timeout=600)
        with gzip.open(trace_path, "rt") as f:
            trace = json.load(f)
        host_checks = host_side_checks(
            data_dir, job, traced["expected"], traced["pool_bytes"], args.iterations
        )
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
    print(f"\n{'host side':<40}{'wanted':>12}{'traced':>12}")
    for check, want, got in host_checks:
        ok &= got == want
        print(f"{check:<40}{want:>12}{got:>12}{'' if got == want else '   MISMATCH'}")
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
                    "host_side": [list(c) for c in host_checks],
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
