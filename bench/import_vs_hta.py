"""Importing a big Kineto / TF timeline file against HolisticTraceAnalysis (HTA).

Prints figures, asserts nothing. Builds a Kineto file of ``--events`` events by tiling a
real trace (``tests/data/traces/kineto-hta/simple_add.json.gz``: each copy shifted past
the previous one, its correlation, External id and flow ids offset so they stay unique)
and a TF timeline file of as many events by tiling
``tf-timeline-ikhlestov/GPU_timeline_03_merged_5_runs.json`` the same way. Then, each in
its own subprocess, alternating rounds:

- ours: ``tfprof-collector summary FILE --view kernels`` (the file read into records,
  prepared, the per-kernel table rendered);
- HTA: ``TraceAnalysis(trace_dir=DIR)`` + ``get_gpu_kernel_breakdown()`` over a folder
  holding the same file (HTA reads every trace of a folder). HTA reads Kineto only; on
  the TF timeline it is tried and its failure printed.

Each child's time is measured inside it, from after its imports to the end of the
breakdown; peak RSS is the child's own (``os.wait4``). Ratios are HTA / ours. The goal is
HTA / ours >= 5x in time (wall and CPU) and >= 1x in peak RSS; each format's last line
says whether this run met it. The load average is printed before and after: on a shared
machine both tools slow down, not alike (ours is one thread; HTA parses in a worker
process), so compare runs made at a similar load.

    .venv/bin/python bench/import_vs_hta.py --events 100000 --rounds 1
    .venv/bin/python bench/import_vs_hta.py --events 1000000 --rounds 2
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
KINETO_SOURCE = Path("kineto-hta") / "simple_add.json.gz"
TF_SOURCE = Path("tf-timeline-ikhlestov") / "GPU_timeline_03_merged_5_runs.json"
GOAL_TIME, GOAL_RSS = 5.0, 1.0  # HTA / ours
GAP_US = 1000  # between one tile's last end and the next one's first start
ID_KEYS = ("correlation", "External id", "external id")
HTA_CALL = "TraceAnalysis(trace_dir=DIR).get_gpu_kernel_breakdown()"


def traces_dir() -> Path:
    shipped, shared = REPO / "tests" / "data" / "traces", REPO.parent / "shared" / "data" / "traces"
    for candidate in (shipped, shared):
        if (candidate / KINETO_SOURCE).is_file():
            return candidate
    raise SystemExit("import_vs_hta: no trace fixtures (tests/data/traces) found")


def _read(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw)
    return doc if isinstance(doc, dict) else {"traceEvents": doc}


def _span(events: list[dict[str, Any]]) -> tuple[float, float]:
    timed = [e for e in events if "ts" in e and e.get("ph") != "M"]
    return min(e["ts"] for e in timed), max(e["ts"] + e.get("dur", 0) for e in timed)


def tile(source: Path, events: int, out: Path) -> int:
    """Write ``out``: ``source``'s events repeated (shifted in time, ids offset) until
    ``events`` are written; metadata events once. Returns the number written."""
    doc = _read(source)
    body = [e for e in doc["traceEvents"] if e.get("ph") != "M"]
    meta_events = [e for e in doc["traceEvents"] if e.get("ph") == "M"]
    first, last = _span(body)
    period = last - first + GAP_US
    all_ids = [int(e["id"]) for e in body if isinstance(e.get("id"), int)]
    for e in body:
        all_ids.extend(
            v for k, v in (e.get("args") or {}).items() if k in ID_KEYS and isinstance(v, int)
        )
    id_stride = 1 + max(all_ids, default=0)
    written = len(meta_events)
    with out.open("w") as f:
        head = {k: v for k, v in doc.items() if k != "traceEvents"}
        f.write(json.dumps(head)[:-1] + (", " if head else "") + '"traceEvents": [\n')
        f.write(",\n".join(json.dumps(e) for e in meta_events))
        copy = 0
        while written < events:
            shift, offset = copy * period, copy * id_stride
            chunk = []
            for e in body[: events - written]:
                e = dict(e, ts=e["ts"] + shift)
                if isinstance(e.get("id"), int):
                    e["id"] += offset
                args = e.get("args")
                if isinstance(args, dict) and any(k in args for k in ID_KEYS):
                    e["args"] = {
                        k: v + offset if k in ID_KEYS and isinstance(v, int) else v
                        for k, v in args.items()
                    }
                chunk.append(json.dumps(e))
            f.write(",\n" + ",\n".join(chunk))
            written += len(chunk)
            copy += 1
        f.write("\n]}\n")
    return written


# -- children: one measurement each, figures as one JSON line on stdout ---------------


def child_ours(path: str) -> dict[str, Any]:
    # Imports first, as HTA's child imports TraceAnalysis before its clock starts.
    from tfprof.collector.cli import main

    with tempfile.NamedTemporaryFile(suffix=".json") as report:
        t0, c0 = time.perf_counter(), time.process_time()
        code = main(["summary", path, "--view", "kernels", "--format", "json", "-o", report.name])
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        rows = json.loads(Path(report.name).read_text())["rows"] if code == 0 else []
    return {"seconds": seconds, "cpu_seconds": cpu, "exit": code, "rows": len(rows)}


def child_hta(trace_dir: str) -> dict[str, Any]:
    import logging

    from hta.trace_analysis import TraceAnalysis

    logging.disable(logging.WARNING)
    t0 = time.perf_counter()
    start = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    analysis = TraceAnalysis(trace_dir=trace_dir)
    _, per_kernel = analysis.get_gpu_kernel_breakdown(visualize=False)
    end = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    # HTA parses in a worker process (a pool of one per trace file): count its CPU too.
    pairs = zip(start, end, strict=True)
    cpu = sum(b.ru_utime + b.ru_stime - a.ru_utime - a.ru_stime for a, b in pairs)
    return {"seconds": time.perf_counter() - t0, "cpu_seconds": cpu, "rows": len(per_kernel)}


def measure(which: str, target: str) -> dict[str, Any]:
    """Run one child; its figures plus its own peak RSS in MiB (``os.wait4``)."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [sys.executable, __file__, "--child", which, target],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        err.seek(0)
        err_tail = (err.read().strip().splitlines() or ["no output"])[-1]
    try:
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        result = {"error": f"exit {proc.returncode}: {err_tail[:200]}"}
    result["peak_mib"] = usage.ru_maxrss / 1024  # Linux: KiB
    return result


def _ratio(theirs: float | None, ours: float | None) -> str:
    return f"{theirs / ours:.2f}x" if theirs and ours else "n/a"


def _at_least(theirs: float | None, ours: float | None, goal: float) -> bool:
    return bool(theirs and ours and theirs / ours >= goal)


def load_line() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None and "error" not in r]
    return statistics.median(values) if values else None


def _shown(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"failed ({r['error']})"
    return (
        f"{r['seconds']:6.2f} s wall, {r['cpu_seconds']:6.2f} s CPU, "
        f"peak RSS {r['peak_mib']:5.0f} MiB, {r['rows']} kernel rows"
    )


def compare(label: str, path: Path, rounds: int) -> None:
    trace_dir = path.parent / f"{path.stem}.hta"
    trace_dir.mkdir(exist_ok=True)
    link = trace_dir / path.name
    if not link.exists():
        link.symlink_to(path)
    runs: dict[str, list[dict[str, Any]]] = {"ours": [], "HTA": []}
    targets = {"ours": str(path), "HTA": str(trace_dir)}
    for i in range(rounds):  # interleaved, so drift on a shared machine hits both alike
        for name, results in runs.items():
            results.append(measure(name.lower(), targets[name]))
            print(f"  {label} round {i + 1} {name:4}: {_shown(results[-1])}")
    ours, hta = runs["ours"], runs["HTA"]
    figures = {key: (_median(ours, key), _median(hta, key)) for key in
               ("seconds", "cpu_seconds", "peak_mib")}  # fmt: skip
    print(
        f"{label}: medians ours / HTA: wall {figures['seconds'][0] or 0:.2f} / "
        f"{figures['seconds'][1] or 0:.2f} s, CPU {figures['cpu_seconds'][0] or 0:.2f} / "
        f"{figures['cpu_seconds'][1] or 0:.2f} s, peak RSS {figures['peak_mib'][0] or 0:.0f} / "
        f"{figures['peak_mib'][1] or 0:.0f} MiB"
    )
    print(
        f"{label}: HTA / ours: wall {_ratio(*reversed(figures['seconds']))}, "
        f"CPU {_ratio(*reversed(figures['cpu_seconds']))}, "
        f"peak RSS {_ratio(*reversed(figures['peak_mib']))}  "
        f"(targets: time >= {GOAL_TIME:g}x, RSS >= {GOAL_RSS:g}x)"
    )
    goals = {"seconds": GOAL_TIME, "cpu_seconds": GOAL_TIME, "peak_mib": GOAL_RSS}
    met = [_at_least(figures[key][1], figures[key][0], goal) for key, goal in goals.items()]
    missed = [what for what, ok in zip(("wall", "CPU", "peak RSS"), met, strict=True) if not ok]
    verdict = "met" if not missed else f"NOT met ({', '.join(missed)} under target)"
    print(f"{label}: goal {verdict}; {load_line()}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--events", type=int, default=1_000_000, help="events per built file (default: %(default)s)"
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="interleaved rounds per tool (default: %(default)s)"
    )
    parser.add_argument(
        "--formats",
        default="kineto,tf",
        help="comma-separated: kineto, tf (default: %(default)s)",
    )
    parser.add_argument(
        "--dir", help="where the built files go (default: a temporary folder, removed after)"
    )
    parser.add_argument("--child", nargs=2, metavar=("WHICH", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        which, target = args.child
        result = child_ours(target) if which == "ours" else child_hta(target)
        print(json.dumps(result))
        return 0
    sources = {"kineto": KINETO_SOURCE, "tf": TF_SOURCE}
    traces = traces_dir()
    print(f"import_vs_hta: {load_line()}")
    with tempfile.TemporaryDirectory(prefix="tfprof-import-bench-") as scratch:
        tmp = args.dir or scratch
        for fmt in args.formats.split(","):
            path = Path(tmp) / f"{fmt}-{args.events}.json"
            t0 = time.perf_counter()
            n = tile(traces / sources[fmt], args.events, path)
            size = path.stat().st_size / 2**20
            print(f"{fmt}: {n} events, {size:.0f} MiB, built in {time.perf_counter() - t0:.1f} s")
            print(f"  ours: tfprof-collector summary FILE --view kernels; HTA: {HTA_CALL}")
            compare(fmt, path, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
