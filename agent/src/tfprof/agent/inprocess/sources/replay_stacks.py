"""A replayed trace's recorded Python stacks, sent with its records (``replay:``).

The trace's frames and stack nodes are interned once into the process's code table
(``StackSink``: the same ids the sampler uses, so one stream never holds two meanings of
an id); each loop of the replay then sends the trace's launch captures moved exactly as
that loop's records are: times placed as theirs (stretched, compressed at max speed with
repeats), correlation ids by the loop's correlation shift, and only those whose time
falls inside a capture window.
"""

from __future__ import annotations

import array
from collections.abc import Callable
from typing import TYPE_CHECKING

from tfprof.core.code_stacks import StackBatch

if TYPE_CHECKING:
    from tfprof.agent.inprocess.stacks.code_capture import StackSink

# kept(times) -> the [lo, hi) index ranges of the sorted times inside a capture window
Kept = Callable[["array.array[int]"], list[tuple[int, int]]]


class StackReplay:
    def __init__(self, sink: StackSink, stacks: StackBatch, names: list[str]) -> None:
        self.sink = sink
        frames = stacks.frames
        frame_ids = [0]
        for file, line, function, first in zip(
            frames["file"], frames["line"], frames["function"], frames["first_line"]
        ):
            frame_ids.append(sink.intern_frame((names[file], line, names[function], first)))
        node_ids = [0]
        for parent, frame in zip(stacks.nodes["parent"], stacks.nodes["frame"]):
            node_ids.append(sink.intern_node(node_ids[parent], frame_ids[frame]))
        samples = stacks.samples
        order = sorted(range(len(stacks)), key=samples["time_ns"].__getitem__)
        self.offsets = array.array("q", (samples["time_ns"][i] for i in order))
        self.threads = array.array("q", (samples["thread"][i] for i in order))
        self.stacks = array.array("q", (node_ids[samples["stack"][i]] for i in order))
        self.correlations = array.array("q", (samples["correlation"][i] for i in order))
        self.kinds = array.array("q", (samples["kind"][i] for i in order))

    def __len__(self) -> int:
        return len(self.offsets)

    def send_loop(
        self,
        place: Callable[[int], int],
        correlation_shift: int,
        kept: Kept,
    ) -> int:
        """Send one loop's captures (``place`` turns a recorded offset into that loop's
        replayed time, its correlation ids moved by ``correlation_shift`` as the loop's
        records are); how many."""
        if not len(self):
            return 0
        times = array.array("q", (place(t) for t in self.offsets))
        ranges = kept(times)
        if not ranges:
            return 0
        correlations = self.correlations
        if correlation_shift:
            from tfprof.agent.inprocess.sources.replay_plan import shift_correlations

            correlations = shift_correlations(correlations, correlation_shift)
        columns = [times, self.threads, self.stacks, correlations, self.kinds]
        out = [array.array("q") for _ in columns]
        for lo, hi in ranges:
            for mine, theirs in zip(out, columns):
                mine.extend(theirs[lo:hi])
        self.sink.add_samples(out)
        return len(out[0])
