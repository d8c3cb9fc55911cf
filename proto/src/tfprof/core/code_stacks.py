"""Python stacks as both sides share them: frames, the prefix tree of stacks, samples.

A process interns its Python frames (file, line, function, and the function's first line,
which with the file and function names the code object) and its stacks as a prefix tree
(a node is its parent node and its innermost frame; node 0 is the empty stack). Ids start
at 1 and every frame and node is sent once, in id order, so a batch says only the first
id of the ones it defines (``frame_base``, ``node_base``), as the string table does. A
sample names the node of its innermost frame: the sampler thread's samples say which
stack a thread was in at a time, a launch capture which stack launched the GPU work of a
CUPTI correlation id.

Imported inside traced processes (the hook, ``replay:``'s readers): standard library only.
Mirrors the ``Stacks`` message of the tfprof.v1 wire (proto/src/tfprof/proto/collector.proto).
"""

from __future__ import annotations

import array
from enum import IntEnum

FRAME_COLUMNS = ("file", "line", "function", "first_line")  # file, function: string indices
NODE_COLUMNS = ("parent", "frame")
SAMPLE_COLUMNS = ("time_ns", "thread", "stack", "correlation", "kind")
# Placeholders a stack may hold: a cut where the walk stopped (depth), and the frame a
# gradient's stack ends in (replayed backward work: the forward op's stack, then this).
TRUNCATED_FUNCTION = "<truncated>"
GRADIENT_FILE = "<autograd>"
GRADIENT_FUNCTION = "(gradient)"
# What a frame's file becomes when it matches a --redact pattern (docs: code attribution).
REDACTED_FILE = "<redacted>"


class StackKind(IntEnum):
    """What a stack sample is; same values as ``tfprof.v1.StackKind``."""

    SAMPLE = 1  # the sampler thread saw the thread in this stack at ``time_ns``
    LAUNCH = 2  # the thread launched the GPU work of ``correlation`` from this stack


def _columns(names: tuple[str, ...]) -> dict[str, array.array[int]]:
    return {name: array.array("q") for name in names}


class StackBatch:
    """New frames, new stack nodes and samples, one int64 array per column.

    ``frames["file"]`` and ``frames["function"]`` index a string table (the stream's, or a
    trace's ``names``); frame ``frame_base + i`` is row ``i``, node ``node_base + i`` too.
    ``dropped`` is the process's count of samples lost so far (cumulative).
    """

    __slots__ = ("dropped", "frame_base", "frames", "node_base", "nodes", "samples")

    def __init__(self, frame_base: int = 1, node_base: int = 1, dropped: int = 0) -> None:
        self.frame_base = frame_base
        self.node_base = node_base
        self.dropped = dropped
        self.frames = _columns(FRAME_COLUMNS)
        self.nodes = _columns(NODE_COLUMNS)
        self.samples = _columns(SAMPLE_COLUMNS)

    def __len__(self) -> int:
        """The number of samples."""
        return len(self.samples["time_ns"])

    @property
    def num_frames(self) -> int:
        return len(self.frames["file"])

    @property
    def num_nodes(self) -> int:
        return len(self.nodes["parent"])

    def is_empty(self) -> bool:
        return not (len(self) or self.num_frames or self.num_nodes)

    def add_frame(self, file: int, line: int, function: int, first_line: int) -> int:
        """Define the next frame; its id."""
        f = self.frames
        f["file"].append(file)
        f["line"].append(line)
        f["function"].append(function)
        f["first_line"].append(first_line)
        return self.frame_base + len(f["file"]) - 1

    def add_node(self, parent: int, frame: int) -> int:
        """Define the next stack node (``parent`` 0: a root frame); its id."""
        self.nodes["parent"].append(parent)
        self.nodes["frame"].append(frame)
        return self.node_base + len(self.nodes["parent"]) - 1

    def add_sample(
        self, time_ns: int, thread: int, stack: int, correlation: int = 0,
        kind: int = StackKind.SAMPLE,
    ) -> None:  # fmt: skip
        s = self.samples
        s["time_ns"].append(time_ns)
        s["thread"].append(thread)
        s["stack"].append(stack)
        s["correlation"].append(correlation)
        s["kind"].append(int(kind))
