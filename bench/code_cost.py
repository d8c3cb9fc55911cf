"""What Python stacks cost a job: the sampler at its default rate, and launch captures.

1. Sampler (``--code sample``): a job runs alternately plain and with the hook's real code
   capture started in its process (the sampler thread at ``--hz``, the default rate,
   flushing real stacks frames every second into a real string table and frame encoder,
   the bytes then dropped), order alternating per round. Two jobs:

   - ``loop``: a CPU-bound pure-Python loop (a fixed amount of work at stack depth ~40);
   - ``example``: examples/train_mnist_like.py (TensorFlow on CPU, ``--threads 1``).

   Per run: the job's process CPU time (every thread: the sampler's cost and any it
   causes the job), wall time, the sampler thread's own CPU time, the samples taken.
   Prints medians and the CPU share: sampler thread CPU / job CPU (direct), and process
   CPU sampled / plain - 1 (what the job paid in all). Goal: <= 1 %.

2. Launch captures (``--code launch``): the handler CUPTI calls on the launching thread,
   called as cupti-python calls it (``handler(userdata, domain, cbid, cbdata)``, entry and
   exit, real ``cupti.CallbackData``) from genuine stacks of ``--depth`` distinct Python
   functions. Thread CPU per launch, the cost of an empty handler subtracted: a launch
   not taken (the floor every launch pays besides cupti-python's own trampoline, which
   needs a GPU to measure), a launch taken with the previous stack unchanged, with its
   top 2/5/10 frames changed, and with no memo (a full walk); and the mean over a
   model-like pattern at 1 in ``--every``. Goal: <= 2 us per launch taken.

   A third measure of the sampler (``ab``): one process, the loop's work in paired slices,
   the sampler capturing in one slice of each pair; the process's and the main thread's
   CPU per slice, on against off (what the job pays, its drift cancelled pair by pair).

    .venv/bin/python bench/code_cost.py [--rounds 5] [--jobs loop,example] [--hz 100]

Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "train_mnist_like.py"
DEPTH = 40


def chain(depth: int, leaf: Callable[[], Any], tag: str = "layer") -> Callable[[], Any]:
    """``depth`` distinct functions (their own code objects), each calling the next, the
    last calling ``leaf``: a genuine stack as deep as a model's."""
    source = "\n".join(
        f"def {tag}_{i}():\n    x = {i}\n    return {tag}_{i + 1}()" for i in range(depth)
    )
    namespace: dict[str, Any] = {f"{tag}_{depth}": leaf}
    exec(compile(source, f"<{tag}>", "exec"), namespace)
    entry: Callable[[], Any] = namespace[f"{tag}_0"]
    return entry


def loop_work(blocks: int) -> None:
    def block() -> None:
        total = 0
        for i in range(100_000):
            total += i * i % 7

    def blocks_() -> None:
        for _ in range(blocks):
            block()

    chain(DEPTH, blocks_)()


class NullOutlet:
    """What the hook does with a flush, short of the socket: real names, a real frame."""

    def __init__(self) -> None:
        from tfprof.agent.inprocess.frames import StringTable

        self.strings = StringTable()
        self.bytes = 0

    def intern(self, name: str) -> int:
        return self.strings.intern(name)

    def submit_stacks(self, batch: Any, wait: bool = False) -> bool:
        from tfprof.agent.inprocess.frames import encode_stacks_frame

        base, pending = self.strings.take_pending()
        self.bytes += len(encode_stacks_frame(batch, base, pending))
        return True

    def warn(self, message: str) -> None:
        print(f"warning: {message}", file=sys.stderr)


def child(job: str, sampled: bool, hz: float, args: list[str]) -> None:
    """One run, in its own process: the job, with or without the sampler; prints JSON."""
    capture = None
    if sampled:
        from tfprof.agent.inprocess.stacks.code_capture import CodeCapture

        capture = CodeCapture(NullOutlet(), "sample", hz, 8)
        capture.start(True)
    c0, w0 = time.process_time(), time.perf_counter()
    if job == "loop":
        loop_work(int(args[0]))
    else:
        import runpy

        sys.argv = [str(EXAMPLE), *args]
        try:
            runpy.run_path(str(EXAMPLE), run_name="__main__")
        except SystemExit:
            pass
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    out: dict[str, Any] = {"cpu_s": cpu, "wall_s": wall}
    if capture is not None:
        capture.stop(2.0)
        sampler = capture.sampler
        out.update(sampler_cpu_s=sampler.cpu_s, ticks=sampler.ticks, slowed=sampler.slowed,
                   dropped=capture.buffer.dropped)  # fmt: skip
    print("RESULT " + json.dumps(out), flush=True)


def run_child(job: str, sampled: bool, hz: float, args: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", job, "--child-sampled", str(int(sampled)),
           "--hz", str(hz), "--", *args]  # fmt: skip
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONHASHSEED="0")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if done.returncode:
        raise SystemExit(f"run failed: {' '.join(cmd)}\n{done.stderr[-2000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    result: dict[str, Any] = json.loads(line[len("RESULT ") :])
    return result


def sampler_part(rounds: int, jobs: list[str], hz: float, loop_blocks: int, steps: int) -> None:
    print(f"== sampler at {hz:g} Hz, {rounds} interleaved rounds per job ==")
    for job in jobs:
        args = [str(loop_blocks)] if job == "loop" else ["--steps", str(steps), "--threads", "1"]
        runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
        for r in range(rounds):
            for sampled in (False, True) if r % 2 == 0 else (True, False):
                runs[sampled].append(run_child(job, sampled, hz, args))
        plain, sampled_runs = runs[False], runs[True]

        def med(rs: list[dict[str, Any]], key: str) -> float:
            return float(statistics.median(r[key] for r in rs))

        shares = [r["sampler_cpu_s"] / r["cpu_s"] for r in sampled_runs]
        rates = [r["ticks"] / r["wall_s"] for r in sampled_runs]
        what = f"{loop_blocks} blocks at depth ~{DEPTH}" if job == "loop" else f"{steps} steps"
        print(f"[{job}] ({what})")
        for label, rs in (("plain", plain), ("sampled", sampled_runs)):
            cpus = " ".join(f"{r['cpu_s']:.2f}" for r in rs)
            print(f"  {label:8} process CPU s: {cpus}   median {med(rs, 'cpu_s'):.3f}, "
                  f"wall {med(rs, 'wall_s'):.3f} s")  # fmt: skip
        print(f"  sampler thread CPU / job CPU: median {100 * statistics.median(shares):.2f} % "
              f"(runs {', '.join(f'{100 * s:.2f}' for s in shares)})")  # fmt: skip
        cpu = med(sampled_runs, "cpu_s") / med(plain, "cpu_s") - 1
        wall = med(sampled_runs, "wall_s") / med(plain, "wall_s") - 1
        print(f"  job CPU sampled / plain - 1: {100 * cpu:+.2f} %; wall {100 * wall:+.2f} %")
        print(
            f"  ticks per second achieved: median {statistics.median(rates):.0f} "
            f"(rate halvings by the budget: {sum(r['slowed'] for r in sampled_runs)})"
        )


def ab_part(pairs: int, slice_blocks: int, hz: float) -> None:
    """One process: the main thread (at depth ~40) runs equal slices of the loop's work,
    the sampler capturing during every other one (order alternating per pair). Paired
    slices cancel the machine's drift; the process CPU counts the sampler's own time."""
    from tfprof.agent.inprocess.stacks.code_capture import CodeCapture

    capture = CodeCapture(NullOutlet(), "sample", hz, 8)
    capture.start(False)
    process: list[float] = []
    main: list[float] = []
    on_wall = on_ticks = 0.0

    def block() -> None:
        total = 0
        for i in range(100_000):
            total += i * i % 7

    def measure() -> None:
        nonlocal on_wall, on_ticks
        for p in range(pairs):
            cost = {}
            for on in (True, False) if p % 2 else (False, True):
                capture.set_capturing(on)
                ticks = capture.sampler.ticks
                c0, t0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
                for _ in range(slice_blocks):
                    block()
                cost[on] = (time.process_time() - c0, time.thread_time() - t0)
                if on:
                    on_wall += time.perf_counter() - w0
                    on_ticks += capture.sampler.ticks - ticks
            process.append(cost[True][0] / cost[False][0] - 1)
            main.append(cost[True][1] / cost[False][1] - 1)

    chain(DEPTH, measure)()
    capture.stop(2.0)

    def q(xs: list[float], f: float) -> float:
        return sorted(xs)[min(len(xs) - 1, int(f * len(xs)))]

    print(f"[loop, in one process] {pairs} pairs of {slice_blocks}-block slices, sampler on in "
          f"one of each pair (alternating order)")  # fmt: skip
    for label, xs in (("process CPU on / off - 1", process),
                      ("main thread CPU on / off - 1", main)):  # fmt: skip
        print(f"  {label:30} median {100 * statistics.median(xs):+.2f} % "
              f"(p25 {100 * q(xs, 0.25):+.2f}, p75 {100 * q(xs, 0.75):+.2f})")  # fmt: skip
    print(f"  ticks per second while on: {on_ticks / on_wall:.0f}")


# -- launch captures ------------------------------------------------------------------


def launch_part(depth: int, every: int, calls: int, repeats: int) -> None:
    from cupti import cupti

    from tfprof.agent.inprocess.stacks.code_table import CodeTable
    from tfprof.agent.inprocess.stacks.launch_callbacks import RUNTIME_API, LaunchCapture
    from tfprof.agent.inprocess.stacks.samples import SampleBuffer

    cbid = int(cupti.RuntimeApiTraceCbid.cudaLaunchKernel_v7000)
    enter, leave = cupti.CallbackData(), cupti.CallbackData()
    enter.callback_site = int(cupti.ApiCallbackSite.API_ENTER)
    leave.callback_site = int(cupti.ApiCallbackSite.API_EXIT)
    enter.correlation_id = leave.correlation_id = 1

    def fresh(n: int) -> LaunchCapture:
        return LaunchCapture(CodeTable(), SampleBuffer(limit=1 << 30), n, print)

    Leaf = Callable[[Callable[[], None]], Callable[[], None]]

    def straight(launch: Callable[[], None]) -> Callable[[], None]:
        return launch

    def branches(k: int) -> Leaf:
        """Launches alternating between two sub-stacks of k frames: the memo keeps the
        frames below them, the k top ones change every launch."""

        def make(launch: Callable[[], None]) -> Callable[[], None]:
            left, right = chain(k, launch, "left"), chain(k, launch, "right")
            flip = [False]

            def body() -> None:
                flip[0] = not flip[0]
                (left if flip[0] else right)()

            return body

        return make

    def timed(handler: Callable[..., None], leaf: Leaf) -> float:
        """Median thread-CPU ns per launch (entry + exit) over ``repeats`` runs, run
        under a stack of ``depth`` distinct functions."""
        results: list[float] = []

        def launch() -> None:
            handler(None, RUNTIME_API, cbid, enter)
            handler(None, RUNTIME_API, cbid, leave)

        def measure() -> None:
            body = leaf(launch)
            for _ in range(repeats):
                c0 = time.thread_time_ns()
                for _ in range(calls):
                    body()
                results.append((time.thread_time_ns() - c0) / calls)

        chain(depth, measure)()
        return statistics.median(results)

    def noop(userdata: Any, domain: int, cbid: int, cbdata: Any) -> None:
        return None

    # new frames per launch: straight 1 (the launching function's), branches(k) k + 2
    # (the loop body calling the branch, its k frames, the launching function)
    leaves: dict[str, Leaf] = {"straight": straight, "top 3": branches(1),
                               "top 4": branches(2), "top 5": branches(3),
                               "top 10": branches(8)}  # fmt: skip
    base = {name: timed(noop, leaf) for name, leaf in leaves.items()}

    def cost(handler: Callable[..., None], leaf: str) -> float:
        return (timed(handler, leaves[leaf]) - base[leaf]) / 1e3

    never = fresh(1 << 40)
    never._sites = _EverySite()  # every site seen, never the N-th: nothing is taken
    rows = [("launch not taken (site seen, not the N-th)", cost(never, "straight"))]
    for leaf, label in (("straight", "taken, the launching frame new (1)"),
                        ("top 3", "taken, top 3 frames new"),
                        ("top 5", "taken, top 5 frames new"),
                        ("top 10", "taken, top 10 frames new")):  # fmt: skip
        rows.append((label, cost(fresh(1), leaf)))
    walker = fresh(1)
    walker._stack = lambda memo, top: walker.table.stack_of(top)  # type: ignore[method-assign]
    rows.append(("taken, no memo (a full walk each time)", cost(walker, "straight")))
    mixed = fresh(every)
    per_launch = cost(mixed, "top 4")
    print(f"\n== launch captures: thread CPU per launch (entry + exit calls), stack depth "
          f"~{depth}, {calls:,} launches x {repeats} runs, "
          "empty handler subtracted ==")  # fmt: skip
    floor = rows[0][1]
    for label, us in rows:
        extra = f"   (+{us - floor:.2f} us over a launch not taken)" if us is not floor else ""
        print(f"  {label:52} {us:6.2f} us{extra}")
    print(f"  {f'mean per launch at 1 in {every} (top 4 frames new)':52} "
          f"{per_launch:6.2f} us ({mixed.captured:,} of {mixed.launches:,} taken)")  # fmt: skip
    print("  cupti-python's trampoline (entry and exit) comes on top of every launch on a GPU")


class _EverySite(set):  # type: ignore[type-arg]
    """A set of call sites that holds every site."""

    def __contains__(self, item: object) -> bool:
        return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds per job (5)")
    ap.add_argument("--jobs", default="loop,example", help="loop, example or both (default)")
    ap.add_argument("--hz", type=float, default=100.0, help="sampler rate (100, the default)")
    ap.add_argument("--loop-blocks", type=int, default=1500, help="loop job's blocks (1500)")
    ap.add_argument("--steps", type=int, default=1000, help="example job's steps (1000)")
    ap.add_argument("--depth", type=int, default=DEPTH, help="stack depth of launches (40)")
    ap.add_argument("--every", type=int, default=8, help="launch captures: 1 in N (8)")
    ap.add_argument("--launches", type=int, default=20_000, help="launches per timing run")
    ap.add_argument("--parts", default="sampler,ab,launch",
                    help="sampler (separate runs), ab (paired slices in one process), launch; "
                         "default: all three")  # fmt: skip
    ap.add_argument("--pairs", type=int, default=40, help="ab: on/off slice pairs (40)")
    ap.add_argument("--slice-blocks", type=int, default=40, help="ab: work blocks a slice (40)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-sampled", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, bool(a.child_sampled), a.hz, a.rest)
        return
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}")  # fmt: skip
    parts = a.parts.split(",")
    if "sampler" in parts:
        sampler_part(a.rounds, a.jobs.split(","), a.hz, a.loop_blocks, a.steps)
    if "ab" in parts:
        ab_part(a.pairs, a.slice_blocks, a.hz)
    if "launch" in parts:
        launch_part(a.depth, a.every, a.launches, 7)


if __name__ == "__main__":
    main()
