"""This process's Python frames and stacks, interned once each (``tfprof.core.code_stacks``).

A live frame is keyed by its code object's identity and its last instruction
(``id(code)``, ``f_lasti``): hashing a code object hashes its contents on every call, an
``id`` does not, and the code objects seen are kept alive here so their ids are never
reused for other code. A stack is a path in a prefix tree keyed by (parent node,
``id(code)``, ``f_lasti``): one dict lookup per frame, and a stack seen before costs no
allocation. File, line and function are read once, when a key is first seen, with the
file redacted when it matches a ``--redact`` pattern. Frames that arrive described
(a replayed trace's) are interned by their description into the same ids.

Lookups take no lock (a dict read is atomic under the GIL); making a frame or node does,
so two threads never give one key two ids. New frames and nodes wait for the next stacks
frame (``take_pending``), and go again when that frame was dropped (``restore_pending``).
"""

from __future__ import annotations

import array
import threading
from collections.abc import Sequence
from types import CodeType, FrameType

from tfprof.core.code_stacks import REDACTED_FILE, TRUNCATED_FUNCTION

# Bounds what one process may intern (a dict entry and two array slots a node): beyond
# them a sample whose stack needs a new node is dropped and counted, never the job's memory.
MAX_NODES = 1 << 18
MAX_FRAMES = 1 << 17
# The innermost frames a walk keeps; deeper stacks start at a "<truncated>" root frame.
MAX_DEPTH = 256

# (file, line, function, first line) of a frame.
FrameInfo = tuple[str, int, str, int]
_TRUNCATED: FrameInfo = ("", 0, TRUNCATED_FUNCTION, 0)


class Pending:
    """Frames and nodes made since the last ``take_pending``: ids from the bases on."""

    __slots__ = ("frame_base", "frames", "node_base", "nodes")

    def __init__(
        self, frame_base: int, frames: list[FrameInfo], node_base: int,
        nodes: list[tuple[int, int]],
    ) -> None:  # fmt: skip
        self.frame_base = frame_base
        self.frames = frames
        self.node_base = node_base
        self.nodes = nodes  # (parent, frame)


class CodeTable:
    def __init__(self, redact: Sequence[str] = ()) -> None:
        self._patterns = tuple(p.lower() for p in redact if p)
        self._lock = threading.Lock()
        # live keys: (parent, id(code), lasti) -> node; (id(code), lasti) -> frame
        self.nodes: dict[tuple[int, int, int], int] = {}
        self._live_frames: dict[tuple[int, int], int] = {}
        self._codes: dict[int, CodeType] = {}  # pinned: their ids key the tables
        # described keys: (parent, frame) -> node; FrameInfo -> frame
        self._described_nodes: dict[tuple[int, int], int] = {}
        self._described_frames: dict[FrameInfo, int] = {}
        self._frames: list[FrameInfo] = [("", 0, "", 0)]  # by id; 0 is no frame
        self._parent = array.array("q", [0])  # by node id; 0 is the empty stack
        self._frame_of = array.array("q", [0])
        self._frames_sent = 1  # ids below these are in a frame handed to the sink
        self._nodes_sent = 1

    @property
    def num_nodes(self) -> int:
        return len(self._parent) - 1

    @property
    def num_frames(self) -> int:
        return len(self._frames) - 1

    def frame(self, frame_id: int) -> FrameInfo:
        return self._frames[frame_id]

    def node(self, node_id: int) -> tuple[int, int]:
        """(parent, frame) of a node."""
        return self._parent[node_id], self._frame_of[node_id]

    # -- live frames ---------------------------------------------------------------------

    def stack_of(self, top: FrameType | None) -> int:
        """The node of ``top``'s stack, walked afresh (no frame is kept: a frame held
        past its call keeps its locals alive, and costs the thread that returns from
        it); 0 when the table is full or there is no frame."""
        frames: list[FrameType] = []
        f = top
        while f is not None and len(frames) < MAX_DEPTH:
            frames.append(f)
            f = f.f_back
        node = self.truncated_root() if f is not None else 0
        get = self.nodes.get
        for f in reversed(frames):
            found = get((node, id(f.f_code), f.f_lasti))
            if found is None:
                found = self.child(node, f)
                if not found:
                    return 0
            node = found
        return node

    def child(self, parent: int, f: FrameType) -> int:
        """The node of frame ``f`` under ``parent``, made if new; 0 when the table is full."""
        code = f.f_code
        key = (parent, id(code), f.f_lasti)
        with self._lock:
            found = self.nodes.get(key)
            if found is not None:
                return found
            if len(self._parent) > MAX_NODES:
                return 0
            frame_key = (id(code), f.f_lasti)
            frame_id = self._live_frames.get(frame_key)
            if frame_id is None:
                if len(self._frames) > MAX_FRAMES:
                    return 0
                function = getattr(code, "co_qualname", code.co_name)  # 3.11+: qualified
                line = f.f_lineno or code.co_firstlineno
                info = (code.co_filename, line, function, code.co_firstlineno)
                frame_id = self._add_frame(info)
                self._codes[id(code)] = code
                self._live_frames[frame_key] = frame_id
            node = self._add_node(parent, frame_id)
            self.nodes[key] = node
            return node

    def truncated_root(self) -> int:
        return self.described_node(0, self.described_frame(_TRUNCATED))

    # -- described frames (replayed traces) ----------------------------------------------

    def described_frame(self, info: FrameInfo) -> int:
        """The id of a frame given by its description; 0 when the table is full."""
        found = self._described_frames.get(info)
        if found is not None:
            return found
        with self._lock:
            found = self._described_frames.get(info)
            if found is None:
                if len(self._frames) > MAX_FRAMES:
                    return 0
                found = self._described_frames[info] = self._add_frame(info)
            return found

    def described_node(self, parent: int, frame: int) -> int:
        """The node of ``frame`` under ``parent``; 0 when the table is full."""
        key = (parent, frame)
        found = self._described_nodes.get(key)
        if found is not None:
            return found
        with self._lock:
            found = self._described_nodes.get(key)
            if found is None:
                if len(self._parent) > MAX_NODES or not frame:
                    return 0
                found = self._described_nodes[key] = self._add_node(parent, frame)
            return found

    # -- what travels ----------------------------------------------------------------

    def _add_frame(self, info: FrameInfo) -> int:
        path = info[0]
        if self._patterns and any(p in path.lower() for p in self._patterns):
            info = (REDACTED_FILE, *info[1:])
        self._frames.append(info)
        return len(self._frames) - 1

    def _add_node(self, parent: int, frame: int) -> int:
        self._parent.append(parent)
        self._frame_of.append(frame)
        return len(self._parent) - 1

    def take_pending(self) -> Pending:
        with self._lock:
            frame_base, node_base = self._frames_sent, self._nodes_sent
            self._frames_sent, self._nodes_sent = len(self._frames), len(self._parent)
            return self._pending(frame_base, node_base)

    def restore_pending(self, frame_base: int, node_base: int) -> None:
        """Undo ``take_pending`` when the frame carrying them was dropped."""
        with self._lock:
            self._frames_sent = min(self._frames_sent, frame_base)
            self._nodes_sent = min(self._nodes_sent, node_base)

    def sent(self) -> Pending:
        """Every frame and node already handed to a frame: what a fresh stream needs."""
        with self._lock:
            return self._pending(1, 1, self._frames_sent, self._nodes_sent)

    def _pending(
        self, frame_base: int, node_base: int, frame_end: int | None = None,
        node_end: int | None = None,
    ) -> Pending:  # fmt: skip
        frame_end = len(self._frames) if frame_end is None else frame_end
        node_end = len(self._parent) if node_end is None else node_end
        nodes = list(zip(self._parent[node_base:node_end], self._frame_of[node_base:node_end]))
        return Pending(frame_base, self._frames[frame_base:frame_end], node_base, nodes)
