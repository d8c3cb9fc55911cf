"""Launch captures: the launching thread's Python stack, on CUPTI's callback API.

``--code launch`` subscribes this handler to CUPTI's runtime and driver callbacks for the
calls that put work on a GPU (kernel and graph launches, async copies and memsets) while
a capture window is open, and unsubscribes when it closes (so another tool may take
CUPTI's one subscriber slot between windows). CUPTI calls the handler on the launching
thread, at the call's entry and exit, for every such call: that is the price of the mode,
paid by launches whether or not their stack is taken. At the entry of a launch the
handler takes the thread's stack for:

- every ``every``-th launch of the process (1 in N), and
- the first launch from each call site (the innermost Python line that made the call),
  so a rare launch is seen even when N is large;

and keeps (time, OS thread id, stack, CUPTI correlation id) as a ``LAUNCH`` sample; the
correlation id is the one the launch's API record and its kernel or copy carry, so the
join is exact. A driver call made inside a runtime call (cudaLaunchKernel calls
cuLaunchKernel) is not counted again.

A stack is taken with a per-thread memo of the previous one: frames still on the stack
with the same last instruction (and the same parent) keep their prefix-tree node, so only
the frames that changed are looked up. The memo holds the thread's own frames, and with
them the locals of calls that have returned; memos of threads that launched nothing for a
flush period are dropped (``forget_idle``), and all at a window's end.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import FrameType, ModuleType
from typing import Any

from tfprof.agent.inprocess.clock import now_ns as _now
from tfprof.agent.inprocess.stacks.code_table import MAX_DEPTH, CodeTable
from tfprof.agent.inprocess.stacks.samples import SampleBuffer
from tfprof.core.code_stacks import StackKind

# The calls whose stacks are taken, by CUPTI enum member name (names missing from an
# older cupti-python are skipped).
RUNTIME_LAUNCHES = (
    "cudaLaunchKernel_v7000", "cudaLaunchKernel_ptsz_v7000", "cudaLaunchKernelExC_v11060",
    "cudaLaunchKernelExC_ptsz_v11060", "cudaLaunchCooperativeKernel_v9000",
    "cudaLaunchCooperativeKernel_ptsz_v9000", "cudaGraphLaunch_v10000",
    "cudaGraphLaunch_ptsz_v10000", "cudaMemcpyAsync_v3020", "cudaMemcpyAsync_ptsz_v7000",
    "cudaMemsetAsync_v3020", "cudaMemsetAsync_ptsz_v7000",
)  # fmt: skip
DRIVER_LAUNCHES = (
    "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
    "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz", "cuGraphLaunch",
    "cuGraphLaunch_ptsz", "cuMemcpyAsync", "cuMemcpyAsync_ptsz", "cuMemcpyHtoDAsync_v2",
    "cuMemcpyHtoDAsync_v2_ptsz", "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync_v2_ptsz",
    "cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync_v2_ptsz", "cuMemsetD8Async",
    "cuMemsetD8Async_ptsz", "cuMemsetD32Async", "cuMemsetD32Async_ptsz",
)  # fmt: skip
DRIVER_API, RUNTIME_API = 1, 2  # CUpti_CallbackDomain
API_ENTER = 0  # CUpti_ApiCallbackSite
_LAUNCH = int(StackKind.LAUNCH)
# Call sites remembered for "the first launch of each"; beyond this, 1 in N only.
MAX_SITES = 1 << 16


def launch_callbacks(cupti: ModuleType) -> list[tuple[int, int]]:
    """(domain, cbid) of every launch call this cupti-python names."""
    found: list[tuple[int, int]] = []
    for domain, enum, names in (
        (RUNTIME_API, cupti.RuntimeApiTraceCbid, RUNTIME_LAUNCHES),
        (DRIVER_API, cupti.DriverApiTraceCbid, DRIVER_LAUNCHES),
    ):
        found.extend((domain, int(getattr(enum, n))) for n in names if hasattr(enum, n))
    return found


class _Memo:
    """A thread's previous capture, root first: (frame, its last instruction, the node of
    the stack ending at it), each frame's position by its id, the thread's OS id."""

    __slots__ = ("captures", "entries", "index", "native")

    def __init__(self, native: int) -> None:
        self.entries: list[tuple[FrameType, int, int]] = []
        self.index: dict[FrameType, int] = {}  # frame -> position (frames hash by identity)
        self.native = native
        self.captures = 0

    def clear(self) -> None:
        self.entries.clear()
        self.index.clear()


class LaunchCapture:
    """The callback (``__call__``, as cupti-python calls it) and the sampling policy."""

    def __init__(
        self,
        table: CodeTable,
        buffer: SampleBuffer,
        every: int,
        on_error: Callable[[BaseException], None],
    ) -> None:
        self.table = table
        self.buffer = buffer
        self.every = max(1, every)
        self.launches = 0  # entries seen (approximate across threads: no lock)
        self.captured = 0
        self._on_error = on_error
        self._sites: set[tuple[int, int]] = set()
        self._memos: dict[int, _Memo] = {}  # id(memo): the memos of live threads
        self._local = threading.local()

    def __call__(self, userdata: Any, domain: int, cbid: int, cbdata: Any) -> None:
        try:
            if domain == RUNTIME_API:
                entering = cbdata.callback_site == API_ENTER
                self._local.in_runtime = entering
                if not entering:
                    return
            elif cbdata.callback_site != API_ENTER or getattr(self._local, "in_runtime", False):
                return
            self.launches += 1
            try:
                caller = sys._getframe(1)
            except ValueError:  # a thread with no Python frame (a C++ worker)
                return
            site = (id(caller.f_code), caller.f_lasti)
            if self.launches % self.every and site in self._sites:
                return
            self.capture(caller, site, cbdata.correlation_id)
        except Exception as exc:  # never into CUPTI and the launching thread
            self._on_error(exc)

    def capture(self, caller: FrameType, site: tuple[int, int], correlation: int) -> None:
        # The memo lives in the thread's own storage, which dies with the thread: a
        # thread id (get_ident) is reused by a later thread, its memo must not be.
        local = self._local
        memo = getattr(local, "memo", None)
        if memo is None:
            memo = local.memo = _Memo(threading.get_native_id())
        if not memo.captures:  # new, or let go by forget_idle: known to it again
            self._memos[id(memo)] = memo
        stack = self._stack(memo, caller)
        if stack and len(self._sites) < MAX_SITES:
            self._sites.add(site)  # its code is pinned by the table: the id stays its own
        buffer = self.buffer
        queue = buffer.queue  # the buffer's add, inlined: this runs in the launch
        if stack and len(queue) < buffer.limit:
            queue.append((_now(), memo.native, stack, correlation, _LAUNCH))
            self.captured += 1
        else:
            buffer.count_dropped(1)

    def _stack(self, memo: _Memo, top: FrameType) -> int:
        memo.captures += 1
        entries, index = memo.entries, memo.index
        new: list[FrameType] = []
        kept = -1  # the last memo position still valid
        f: FrameType | None = top
        while f is not None:
            at = index.get(f)
            if at is not None and entries[at][1] == f.f_lasti:
                back = f.f_back
                if at == 0:
                    valid = back is None
                else:
                    parent = entries[at - 1]
                    valid = parent[0] is back and parent[1] == back.f_lasti
                if valid:
                    kept = at
                    break
            new.append(f)
            if len(new) > MAX_DEPTH:  # too deep to memo: the plain walk truncates it
                memo.clear()
                return self.table.stack_of(top)
            f = f.f_back
        while len(entries) > kept + 1:
            del index[entries.pop()[0]]
        node = entries[kept][2] if kept >= 0 else 0
        get, child = self.table.nodes.get, self.table.child
        for g in reversed(new):
            lasti = g.f_lasti
            found = get((node, id(g.f_code), lasti))
            if found is None:
                found = child(node, g)
                if not found:  # the table is full
                    memo.clear()
                    return 0
            node = found
            index[g] = len(entries)
            entries.append((g, lasti, node))
        return node

    def forget_idle(self) -> None:
        """Empty the memos of threads that captured nothing since the last call (their
        frames, and what those hold, are let go; a thread that has ended is forgotten)."""
        for key, memo in list(self._memos.items()):
            if memo.captures:
                memo.captures = 0
            else:
                memo.clear()
                self._memos.pop(key, None)

    def forget_all(self) -> None:
        for memo in list(self._memos.values()):
            memo.clear()
        self._memos.clear()


class LaunchCallbacks:
    """The CUPTI subscription of a ``LaunchCapture``: made at a window's start, ended at
    its end. Failures are one line each (``warn``); the sampler goes on without them."""

    def __init__(self, capture: LaunchCapture, warn: Callable[[str], None]) -> None:
        self.capture = capture
        self._warn = warn
        self._cupti: ModuleType | None = None
        self._subscriber: int | None = None
        self._lock = threading.Lock()

    def bind(self, cupti: ModuleType) -> None:
        self._cupti = cupti

    @property
    def subscribed(self) -> bool:
        return self._subscriber is not None

    def set_capturing(self, on: bool) -> bool:
        """Subscribe (``on``) or unsubscribe; False when subscribing failed (said once)."""
        with self._lock:
            cupti = self._cupti
            if cupti is None:
                return False
            if not on:
                self._unsubscribe(cupti)
                self.capture.forget_all()
                return True
            if self._subscriber is not None:
                return True
            try:
                self._subscriber = int(cupti.subscribe(self.capture, None))
                for domain, cbid in launch_callbacks(cupti):
                    cupti.enable_callback(1, self._subscriber, domain, cbid)
            except Exception as exc:
                self._unsubscribe(cupti)
                self._warn(describe_failure(exc))
                return False
            return True

    def _unsubscribe(self, cupti: ModuleType) -> None:
        subscriber, self._subscriber = self._subscriber, None
        if subscriber is not None:
            try:
                cupti.unsubscribe(subscriber)
            except Exception:
                pass


def describe_failure(exc: BaseException) -> str:
    """The one line a job gets when launch stacks cannot be taken."""
    from tfprof.agent.inprocess.sources.cupti_errors import PREFIX, describe_cupti_failure

    if type(exc).__name__ == "NotSupportedError":  # cupti-python without a CUDA driver
        why = f"CUPTI's callback API cannot run here: {exc}"
    else:
        why = describe_cupti_failure(exc)
        if why.startswith(f"{PREFIX}: "):
            why = why[len(PREFIX) + 2 :]
    return f"launch stacks are off ({why}); Python stacks are still sampled"
