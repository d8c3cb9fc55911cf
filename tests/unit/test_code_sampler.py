"""The stack sampler on genuine frames of real threads (agent/.../stacks/sampler.py).

A job whose known functions take known shares of a thread's time: the samples must give
each function its share within a few points, name the lines that ran, skip the agent's
own threads, and keep no frame alive between ticks.
"""

from __future__ import annotations

import inspect
import random
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable

from tests.unit.stack_outlet import Outlet
from tfprof.agent.inprocess.stacks.code_capture import CodeCapture
from tfprof.core.code_stacks import StackKind


def spin(seconds: float) -> None:
    # Thread CPU time, not wall time: on a loaded machine the thread is often descheduled,
    # and a sample can only land where the thread runs (it must reach a bytecode boundary
    # to hand the sampler the GIL), so CPU time is what samples measure here.
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


# Random lengths, so that no rhythm of the work lines up with the sampler's.
def alpha() -> None:
    spin(random.uniform(0.001, 0.011))  # three quarters of the worker's time


def beta() -> None:
    spin(random.uniform(0.0005, 0.0035))  # one quarter


def worker(stop: threading.Event) -> None:
    while not stop.is_set():
        alpha()
        beta()


def idle(stop: threading.Event) -> None:
    stop.wait()


def leaf_of(outlet: Outlet, node: int, wanted: set[str]) -> str:
    return next((f for f in reversed(outlet.functions(node)) if f in wanted), "")


def run_capture(
    seconds: float, *targets: Callable[[threading.Event], object], hz: float = 250
) -> tuple[Outlet, dict[str, int], CodeCapture]:
    outlet = Outlet()
    capture = CodeCapture(outlet, "sample", hz, 8)
    stop = threading.Event()
    threads = [threading.Thread(target=t, args=(stop,), name=getattr(t, "__name__", "t"))
               for t in targets]  # fmt: skip
    for t in threads:
        t.start()
    capture.start(True)
    time.sleep(seconds)
    capture.stop(2.0)
    stop.set()
    for t in threads:
        t.join()
    natives = {t.name: t.native_id or 0 for t in threads}
    return outlet, natives, capture


def test_samples_give_each_function_its_share_of_the_thread() -> None:
    outlet, natives, _ = run_capture(3.0, worker, idle)
    mine = [s for s in outlet.samples if s["thread"] == natives["worker"]]
    assert len(mine) > 200, f"only {len(mine)} samples of the worker"
    counts = Counter(leaf_of(outlet, s["stack"], {"alpha", "beta"}) for s in mine)
    share = counts["alpha"] / (counts["alpha"] + counts["beta"])
    # ~300 samples: a binomial spread of 2.5 points; 7 points is three of those
    assert abs(share - 0.75) < 0.07, counts
    assert counts["alpha"] + counts["beta"] >= 0.95 * len(mine)  # the rest: the loop itself
    assert all(s["kind"] == StackKind.SAMPLE and s["correlation"] == 0 for s in outlet.samples)


def test_a_sample_names_the_files_lines_and_functions_that_ran() -> None:
    outlet, natives, _ = run_capture(1.0, worker, idle)
    idle_samples = [s for s in outlet.samples if s["thread"] == natives["idle"]]
    assert idle_samples
    stack = outlet.stack(idle_samples[-1]["stack"])
    functions = [f for _, _, f in stack]
    # threading's machinery (qualified names on 3.11+), our function, where it waits
    assert functions[0] in ("Thread._bootstrap", "_bootstrap")
    at = functions.index("idle")
    file, line, _ = stack[at]
    assert file == __file__
    source, first = inspect.getsourcelines(idle)
    assert line == first + 1  # the line of stop.wait(): the line executing, not the def
    assert "wait" in functions[at + 1]

    busy = [s for s in outlet.samples if s["thread"] == natives["worker"]]
    spin_lines = {outlet.stack(s["stack"])[-1][1] for s in busy
                  if outlet.functions(s["stack"])[-1] == "spin"}  # fmt: skip
    source, first = inspect.getsourcelines(spin)
    loop_lines = {first + i for i, text in enumerate(source) if "thread_time" in text}
    assert spin_lines and spin_lines <= loop_lines


def test_the_agents_own_threads_are_not_sampled() -> None:
    outlet, natives, capture = run_capture(0.6, idle)
    threads = {s["thread"] for s in outlet.samples}
    assert natives["idle"] in threads
    assert threading.main_thread().native_id in threads  # sleeping in this test
    assert capture.sampler._thread is not None
    assert capture.sampler._thread.native_id not in threads
    for sample in outlet.samples:
        assert "StackSampler._run" not in outlet.functions(sample["stack"])


class Payload:
    pass


def test_no_frame_outlives_its_call_because_of_the_sampler() -> None:
    # Each call makes a local object and sleeps so that ticks see its frame; if the sampler
    # kept a frame between ticks, the object would outlive the call. (It did, through
    # a reference cycle of sys._current_frames()'s dict and the tick's own frame.)
    alive_after_return: list[bool] = []

    def holder() -> weakref.ref[Payload]:
        payload = Payload()
        time.sleep(0.004)
        return weakref.ref(payload)

    def calls(stop: threading.Event) -> None:
        while not stop.is_set():
            ref = holder()
            alive_after_return.append(ref() is not None)

    outlet, _, _ = run_capture(1.0, calls, hz=1000)
    held = [s for s in outlet.samples if "holder" in outlet.functions(s["stack"])[-1]]
    assert len(held) > 20, "the sampler never saw the frames it should not keep"
    # A call may return while a tick (which holds the GIL but can be switched out)
    # holds its frame; between ticks nothing does. Frames kept until the next tick, or
    # until the cyclic GC, would keep nearly every payload alive.
    assert alive_after_return
    assert sum(alive_after_return) <= 0.05 * len(alive_after_return), sum(alive_after_return)


def test_capture_windows_switch_the_sampler() -> None:
    outlet = Outlet()
    capture = CodeCapture(outlet, "sample", 500, 8)
    capture.start(False)  # on-demand: armed, nothing sampled until a window opens
    time.sleep(0.3)
    capture.flush()
    assert outlet.samples == []
    capture.set_capturing(True)
    time.sleep(0.3)
    capture.set_capturing(False)
    time.sleep(0.1)
    n = len(outlet.samples)
    assert n > 10  # closing a window flushes its samples at once
    time.sleep(0.3)
    capture.stop(1.0)
    assert len(outlet.samples) == n


def test_a_full_outlet_drops_and_counts_samples_then_sends_the_frames_again() -> None:
    outlet = Outlet(accept=False)
    capture = CodeCapture(outlet, "sample", 500, 8)
    stop = threading.Event()
    thread = threading.Thread(target=idle, args=(stop,))
    thread.start()
    capture.start(True)
    time.sleep(0.3)
    capture.sampler.stop(1.0)
    capture.flush()
    lost = capture.buffer.dropped
    assert lost > 10
    outlet.accept = True
    assert capture.flush()
    stop.set()
    thread.join()
    assert outlet.samples == [] and outlet.dropped == lost
    # the frames and nodes of the dropped samples went again: stacks resolve
    assert len(outlet.nodes) == capture.table.num_nodes
    assert all(outlet.stack(node) for node in outlet.nodes)
