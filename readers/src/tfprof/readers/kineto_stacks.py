"""Python stacks of PyTorch Kineto traces recorded ``with_stack=True``, as launch captures.

Kineto writes each Python call it saw as a ``python_function`` complete event on its
thread, named ``"<file>(<line>): <function>"`` (the line is the function's own for calls
made while the profiler ran, the executing one for frames already on the stack when it
started), with ``Python id`` and ``Python parent id`` args that chain each call to its
caller. ``PythonStacks`` turns them into the stacks of ``tfprof.core.code_stacks``:

- a frame per distinct (file, line, function); ``<built-in ...>`` calls and
  ``nn.Module: ...`` pseudo-frames keep their whole name as the function, no file;
- a stack node per call, its parent the caller's (the prefix tree merges equal paths);
- a launch capture (``StackKind.LAUNCH``) per runtime or driver call whose correlation id
  a kernel, copy or memset carries: the innermost ``python_function`` on the call's
  thread that encloses its start, at the call's time, with its correlation;
- a launch with no Python call around it (autograd's backward thread) gets the stack of
  the forward op that made its autograd node, found through the enclosing backward op's
  ``Sequence number``, plus a ``(gradient)`` frame, as tfprof attributed gradient ops to
  the forward op's code; launches this finds nothing for get no capture.
"""

from __future__ import annotations

import array
import re
from collections.abc import Iterable
from typing import Any

from tfprof.core.code_stacks import (
    GRADIENT_FILE,
    GRADIENT_FUNCTION,
    StackBatch,
    StackKind,
)
from tfprof.readers.event_fields import non_negative
from tfprof.readers.trace import Event
from tfprof.readers.trace_builder import Layout, TraceBuilder

_FRAME_NAME = re.compile(r"^(?P<file>.*)\((?P<line>\d+)\): (?P<function>.*)$", re.S)
PYTHON_FUNCTION = "python_function"
_BACKWARD = re.compile(r"Backward|^autograd::")


def parse_frame(name: str) -> tuple[str, int, str]:
    """(file, line, function) of a ``python_function`` event's name."""
    m = _FRAME_NAME.match(name)
    if m is None:
        return "", 0, name
    return m.group("file"), int(m.group("line")), m.group("function")


class _Calls:
    """Ranges on one thread, for 'which is the innermost one around time t'."""

    __slots__ = ("ends", "keys", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.keys: list[int] = []

    def add(self, start: int, end: int, key: int) -> None:
        self.starts.append(start)
        self.ends.append(end)
        self.keys.append(key)

    def innermost(self, times: list[int]) -> list[int]:
        """For each time (in any order), the key of the innermost range around it (ends
        included), -1 where none is: one sweep, ranges nesting as Kineto writes them."""
        order = sorted(range(len(self.starts)), key=lambda i: (self.starts[i], -self.ends[i]))
        found = [-1] * len(times)
        open_: list[int] = []  # ranges around the sweep's time, outermost first
        j = 0
        for q in sorted(range(len(times)), key=times.__getitem__):
            t = times[q]
            while j < len(order) and self.starts[order[j]] <= t:
                i = order[j]
                while open_ and self.ends[open_[-1]] < self.starts[i]:
                    open_.pop()
                open_.append(i)
                j += 1
            while open_ and self.ends[open_[-1]] < t:
                open_.pop()
            if open_:
                found[q] = self.keys[open_[-1]]
        return found


class PythonStacks:
    def __init__(self, out: TraceBuilder) -> None:
        self.out = out
        self._names: dict[str, int] = {}  # raw event name -> index in _raw
        self._raw: list[str] = []
        self._ids = array.array("q")  # per call: Python id, parent id, name index
        self._parents = array.array("q")
        self._name_of = array.array("q")
        self._calls: dict[int, _Calls] = {}  # by tid: python calls, keyed by call index
        # Ops that carry an autograd sequence number: forward ones by number, backward
        # ones (named "...Backward..." or "autograd::...") by thread.
        self._forward: dict[int, list[tuple[int, int, int]]] = {}  # seq -> (start, tid, end)
        self._backward: dict[int, _Calls] = {}  # by tid, keyed by sequence number
        self._gradient_frame = 0
        self._gradient_nodes: dict[tuple[int, int], int] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def add_call(self, e: Event) -> None:
        """One ``python_function`` event."""
        if e.get("ph") != "X":
            return
        args = e.get("args")
        if not isinstance(args, dict) or "Python id" not in args:
            return
        name = e.get("name", "")
        name = name if type(name) is str else str(name)
        index = self._names.get(name)
        if index is None:
            index = self._names[name] = len(self._raw)
            self._raw.append(name)
        start, duration = self.out.times(e)
        call = len(self._ids)
        self._ids.append(non_negative(args.get("Python id")))
        parent = args.get("Python parent id")
        self._parents.append(-1 if parent is None else non_negative(parent, -1))
        self._name_of.append(index)
        tid = non_negative(e.get("tid"))
        calls = self._calls.get(tid)
        if calls is None:
            calls = self._calls[tid] = _Calls()
        calls.add(start, start + duration, call)

    def add_op(self, tid: int, name: str, start: int, duration: int, args: dict[str, Any]) -> None:
        """A ``cpu_op`` range (the reader's loop hands over every one with args)."""
        seq = args.get("Sequence number")
        if type(seq) is not int or seq < 0:
            return
        if _BACKWARD.search(name):  # autograd's node (forward ops carry a seq number too)
            ops = self._backward.get(tid)
            if ops is None:
                ops = self._backward[tid] = _Calls()
            ops.add(start, start + duration, seq)
        else:
            self._forward.setdefault(seq, []).append((start, tid, start + duration))

    def finish(self, api: Layout, gpu_correlations: Iterable[int]) -> StackBatch | None:
        """The stacks and launch captures (times in the trace's ns, as records' before
        ``TraceBuilder.finish`` makes them relative); None without Python calls."""
        if not len(self._ids):
            return None
        batch = StackBatch()
        node_of_call = self._nodes(batch)
        wanted = set(gpu_correlations) - {0}
        launches: dict[int, list[tuple[int, int]]] = {}  # tid -> (start, correlation)
        for start, tid, corr in zip(
            api.column("start_ns"), api.column("thread"), api.column("correlation")
        ):
            if corr in wanted:
                launches.setdefault(tid, []).append((start, corr))
        for tid, made in launches.items():
            times = [t for t, _ in made]
            calls = self._calls.get(tid)
            leaves = calls.innermost(times) if calls is not None else [-1] * len(made)
            stacks = [node_of_call[c] if c >= 0 else 0 for c in leaves]
            missing = [i for i, stack in enumerate(stacks) if not stack]
            if missing:
                found = self._gradients(tid, [times[i] for i in missing], node_of_call, batch)
                for i, node in zip(missing, found):
                    stacks[i] = node
            for (t, corr), stack in zip(made, stacks):
                if stack:
                    batch.add_sample(t, tid, stack, corr, StackKind.LAUNCH)
        return batch

    def _nodes(self, batch: StackBatch) -> list[int]:
        """A stack node per call (its caller's node, then its frame); the node of each."""
        frames: dict[int, int] = {}  # raw name index -> frame id
        out = self.out
        for index, raw in enumerate(self._raw):
            file, line, function = parse_frame(raw)
            frames[index] = batch.add_frame(out.name(file), line, out.name(function), line)
        call_of_id = {pid: call for call, pid in enumerate(self._ids)}
        node_of_call = [0] * len(self._ids)
        tree: dict[tuple[int, int], int] = {}
        # Python ids grow as calls are made: a caller's id is below its callees'.
        for call in sorted(range(len(self._ids)), key=self._ids.__getitem__):
            caller = call_of_id.get(self._parents[call], -1)
            parent = node_of_call[caller] if caller >= 0 else 0
            key = (parent, frames[self._name_of[call]])
            node = tree.get(key)
            if node is None:
                node = tree[key] = batch.add_node(*key)
            node_of_call[call] = node
        return node_of_call

    def _gradients(
        self, tid: int, times: list[int], node_of_call: list[int], batch: StackBatch
    ) -> list[int]:
        """Stacks (0: none found) for launches at ``times`` on ``tid`` with no Python call
        around them: the stack of the forward op that has the sequence number of the
        innermost backward op around the launch (the latest such op before it), then a
        ``(gradient)`` frame."""
        ops = self._backward.get(tid)
        if ops is None:
            return [0] * len(times)
        queries: dict[int, list[tuple[int, int]]] = {}  # forward tid -> (its start, i)
        for i, (t, seq) in enumerate(zip(times, ops.innermost(times))):
            forward = [f for f in self._forward.get(seq, ()) if f[0] <= t]
            if forward:
                start, forward_tid, _ = max(forward)
                queries.setdefault(forward_tid, []).append((start, i))
        found = [0] * len(times)
        for forward_tid, asked in queries.items():
            calls = self._calls.get(forward_tid)
            if calls is None:
                continue
            for (_, i), leaf in zip(asked, calls.innermost([t for t, _ in asked])):
                if leaf >= 0:
                    found[i] = self._gradient_node(batch, node_of_call[leaf])
        return found

    def _gradient_node(self, batch: StackBatch, forward: int) -> int:
        if not self._gradient_frame:
            out = self.out
            self._gradient_frame = batch.add_frame(
                out.name(GRADIENT_FILE), 0, out.name(GRADIENT_FUNCTION), 0
            )
        key = (forward, self._gradient_frame)
        node = self._gradient_nodes.get(key)
        if node is None:
            node = self._gradient_nodes[key] = batch.add_node(*key)
        return node
