"""Launch captures on CUPTI's callback API (agent/.../stacks/launch_callbacks.py).

The handler is called as cupti-python calls it, ``handler(userdata, domain, cbid, cbdata)``
on the launching thread, with genuine ``cupti.CallbackData`` objects (they construct
without a driver) from genuine stacks of real threads. Subscribing needs a driver: here
it fails with cupti-python's real error, which must cost one line and no sampling.
"""

from __future__ import annotations

import functools
import inspect
import operator
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

import pytest

from tests.unit.stack_outlet import Outlet
from tfprof.agent.inprocess.stacks.code_capture import CodeCapture
from tfprof.agent.inprocess.stacks.code_table import CodeTable
from tfprof.agent.inprocess.stacks.launch_callbacks import (
    DRIVER_API,
    RUNTIME_API,
    LaunchCallbacks,
    LaunchCapture,
    launch_callbacks,
)
from tfprof.agent.inprocess.stacks.samples import SampleBuffer
from tfprof.core.code_stacks import StackKind

cupti_mod = pytest.importorskip("cupti")
from cupti import cupti  # noqa: E402

ENTER = int(cupti.ApiCallbackSite.API_ENTER)
EXIT = int(cupti.ApiCallbackSite.API_EXIT)
LAUNCH = int(cupti.RuntimeApiTraceCbid.cudaLaunchKernel_v7000)
CU_LAUNCH = int(cupti.DriverApiTraceCbid.cuLaunchKernel)


class Launcher:
    """Makes the handler calls CUPTI makes around one cudaLaunchKernel (entry, the driver
    call inside it, exits), with real CallbackData and a fresh correlation id each.

    ``launcher.launch()`` in a test function is a launching line: ``launch`` hands back a
    callable made of C builtins only, so no Python frame stands between that line and the
    handler, as none does between a framework's Python line and CUDA's callback.
    """

    def __init__(self, handler: LaunchCapture, driver_inside: bool = True) -> None:
        self.handler = handler
        self.driver_inside = driver_inside
        self.correlation = 0
        self.on_launch: Callable[[FrameType], None] | None = None

    @property
    def launch(self) -> Callable[[], object]:
        self.correlation += 1
        if self.on_launch is not None:
            caller = sys._getframe(1)
            self.on_launch(caller)
        calls = []
        data = cupti.CallbackData()
        data.correlation_id = self.correlation
        calls.append(functools.partial(setattr, data, "callback_site", ENTER))
        calls.append(functools.partial(self.handler, None, RUNTIME_API, LAUNCH, data))
        if self.driver_inside:
            inner = cupti.CallbackData()
            inner.correlation_id = self.correlation + 100_000
            for site in (ENTER, EXIT):
                calls.append(functools.partial(setattr, inner, "callback_site", site))
                calls.append(functools.partial(self.handler, None, DRIVER_API, CU_LAUNCH, inner))
        calls.append(functools.partial(setattr, data, "callback_site", EXIT))
        calls.append(functools.partial(self.handler, None, RUNTIME_API, LAUNCH, data))
        return functools.partial(any, map(operator.methodcaller("__call__"), calls))


def make(every: int = 4) -> tuple[LaunchCapture, Outlet, CodeCapture]:
    outlet = Outlet()
    capture = CodeCapture(outlet, "launch", 100, every)
    assert capture.launch is not None
    return capture.launch, outlet, capture


def line_of(function: object, text: str) -> int:
    source, first = inspect.getsourcelines(function)  # type: ignore[arg-type]
    return first + next(i for i, line in enumerate(source) if text in line)


def model_forward(launcher: Launcher) -> int:
    launcher.launch()  # the launching line
    return launcher.correlation


def layer(launcher: Launcher, depth: int) -> int:
    if depth:
        return layer(launcher, depth - 1)
    return model_forward(launcher)


def test_a_capture_names_the_launching_line_and_the_launch_correlation() -> None:
    handler, outlet, capture = make()
    launcher = Launcher(handler)
    correlation = model_forward(launcher)
    capture.flush()
    (sample,) = outlet.samples
    assert sample["kind"] == StackKind.LAUNCH
    assert sample["correlation"] == correlation  # the runtime call's, not the driver's
    assert sample["thread"] == threading.get_native_id()
    stack = outlet.stack(sample["stack"])
    # the innermost frame is the Python line that called into CUDA, not our handler
    assert stack[-1] == (__file__, line_of(model_forward, "launcher.launch()"), "model_forward")
    assert stack[-2][2] == "test_a_capture_names_the_launching_line_and_the_launch_correlation"


def test_one_launch_in_n_and_the_first_of_each_call_site() -> None:
    handler, outlet, capture = make(every=4)
    launcher = Launcher(handler)
    for _ in range(40):
        launcher.launch()  # one call site, 40 launches
    launcher.launch()  # a second site: its first launch is taken (41 % 4 != 0)
    capture.flush()
    got = [s["correlation"] for s in outlet.samples]
    assert got == [1, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 41]
    assert handler.launches == 41 and handler.captured == 12


def test_exits_and_driver_calls_inside_a_runtime_call_are_not_launches() -> None:
    handler, outlet, capture = make(every=1)
    launcher = Launcher(handler, driver_inside=True)
    for _ in range(5):
        launcher.launch()
    assert handler.launches == 5
    direct = cupti.CallbackData()  # a driver launch of its own (Triton, cuLaunchKernelEx)
    direct.correlation_id = 777
    direct.callback_site = ENTER
    handler(None, DRIVER_API, CU_LAUNCH, direct)
    capture.flush()
    assert [s["correlation"] for s in outlet.samples] == [1, 2, 3, 4, 5, 777]


def branch(launcher: Launcher, which: int) -> int:
    if which:
        return left(launcher)
    return right(launcher)


def left(launcher: Launcher) -> int:
    launcher.launch()
    return 0


def right(launcher: Launcher) -> int:
    launcher.launch()
    return 1


def gen_launches(launcher: Launcher) -> Iterator[int]:
    while True:
        launcher.launch()
        yield launcher.correlation


def test_the_memo_gives_what_a_fresh_walk_gives() -> None:
    # Changing branches, recursion of changing depth, and a generator resumed from two
    # different lines of its caller: the memoised stack must equal a full walk's.
    handler, outlet, capture = make(every=1)
    launcher = Launcher(handler)
    fresh = CodeTable()
    expected: list[list[tuple[str, int, str]]] = []
    launcher.on_launch = lambda caller: expected.append(resolve(fresh, fresh.stack_of(caller)))
    for i in range(6):
        branch(launcher, i % 2)
        layer(launcher, i % 3)
    gen = gen_launches(launcher)
    next(gen)  # resumed from this line...
    for _ in range(2):
        next(gen)  # ...and from this one
    capture.flush()
    got = [outlet.stack(s["stack"]) for s in outlet.samples]
    assert len(got) == len(expected) == 15
    assert got == expected


def resolve(table: CodeTable, node: int) -> list[tuple[str, int, str]]:
    out = []
    while node:
        parent, frame = table.node(node)
        file, line, function, _ = table.frame(frame)
        out.append((file, line, function))
        node = parent
    return out[::-1]


def test_launches_from_several_threads_carry_their_own_thread_and_stack() -> None:
    handler, outlet, capture = make(every=1)
    launcher = Launcher(handler)
    natives: dict[str, int] = {}
    lock = threading.Lock()

    def worker_a() -> None:
        natives["a"] = threading.get_native_id()
        for _ in range(200):
            with lock:
                left(launcher)

    def worker_b() -> None:
        natives["b"] = threading.get_native_id()
        for _ in range(200):
            with lock:
                right(launcher)

    threads = [threading.Thread(target=worker_a), threading.Thread(target=worker_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    capture.flush()
    assert len(outlet.samples) == 400
    for sample in outlet.samples:
        functions = outlet.functions(sample["stack"])
        owner = "a" if "worker_a" in functions[-2] else "b"
        assert sample["thread"] == natives[owner]
        assert functions[-1] == ("left" if owner == "a" else "right")


def test_a_thread_after_an_ended_one_gets_its_own_thread_id() -> None:
    # A later thread often reuses an ended thread's get_ident(): its launches must carry
    # its own OS thread id, not the ended thread's.
    handler, outlet, capture = make(every=1)
    launcher = Launcher(handler)
    natives: list[int] = []

    def worker() -> None:
        natives.append(threading.get_native_id())
        for _ in range(5):
            left(launcher)

    for _ in range(6):  # one after the other: each starts once the previous has ended
        t = threading.Thread(target=worker)
        t.start()
        t.join()
    capture.flush()
    assert len(outlet.samples) == 30
    assert [s["thread"] for s in outlet.samples] == [n for n in natives for _ in range(5)]


def test_a_handler_failure_is_one_line_and_never_raises_into_cuda() -> None:
    warnings: list[str] = []
    handler = LaunchCapture(CodeTable(), SampleBuffer(), 1, lambda e: warnings.append(str(e)))
    for _ in range(3):
        handler(None, RUNTIME_API, LAUNCH, None)  # no CallbackData: AttributeError inside
    assert len(warnings) == 3  # reported to on_error, which CodeCapture says once
    outlet = Outlet()
    capture = CodeCapture(outlet, "launch", 100, 1)
    assert capture.launch is not None
    for _ in range(3):
        capture.launch(None, RUNTIME_API, LAUNCH, None)
    assert len(outlet.warnings) == 1 and outlet.warnings[0].startswith("a launch stack failed")


def test_the_launch_calls_are_the_ones_cupti_python_names() -> None:
    found = launch_callbacks(cupti)
    assert (RUNTIME_API, LAUNCH) in found and (DRIVER_API, CU_LAUNCH) in found
    assert (DRIVER_API, int(cupti.DriverApiTraceCbid.cuLaunchKernelEx)) in found
    assert (RUNTIME_API, int(cupti.RuntimeApiTraceCbid.cudaGraphLaunch_v10000)) in found
    assert len(found) == len(set(found)) >= 25


def test_without_a_driver_subscribing_fails_in_one_line_and_sampling_goes_on() -> None:
    outlet = Outlet()
    capture = CodeCapture(outlet, "launch", 200, 4)
    assert capture.callbacks is not None
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    capture.start(True, cupti)  # cupti.subscribe raises NotSupportedError here
    capture.set_capturing(False)
    capture.set_capturing(True)  # the next window tries again, and says nothing new
    time.sleep(0.3)
    capture.stop(1.0)
    stop.set()
    thread.join()
    assert not capture.callbacks.subscribed
    assert len(set(outlet.warnings)) == 1
    (line,) = set(outlet.warnings)
    assert line.startswith("launch stacks are off (CUPTI's callback API cannot run here: ")
    assert "libcuda.so.1" in line and line.endswith("Python stacks are still sampled")
    assert any(s["kind"] == StackKind.SAMPLE for s in outlet.samples)


def test_a_subscription_error_names_its_cause() -> None:
    # cupti-python's own exception type for CUPTI errors, with a real status
    status = int(cupti.Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
    from tfprof.agent.inprocess.stacks.launch_callbacks import describe_failure

    line = describe_failure(cupti.cuptiError(status))
    assert "another profiler already holds CUPTI" in line
    assert line.startswith("launch stacks are off (") and "still sampled" in line


def test_callbacks_are_subscribed_per_window() -> None:
    warned: list[str] = []
    callbacks = LaunchCallbacks(LaunchCapture(CodeTable(), SampleBuffer(), 1, print), warned.append)
    assert callbacks.set_capturing(True) is False  # not bound to cupti-python: nothing
    callbacks.bind(cupti)
    assert callbacks.set_capturing(False) is True  # closing what is not open is fine
    assert callbacks.set_capturing(True) is False and len(warned) == 1
