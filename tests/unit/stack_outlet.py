"""A hook stand-in for code capture tests: real string table, stacks frames kept decoded.

Every stacks batch ``CodeCapture`` hands over goes through the real frame encoding and
decoding (``frames.encode_stacks_frame`` / ``decode_stacks``), and the decoded batches are
resolved back to stacks of (file, line, function) the way the collector does.
"""

from __future__ import annotations

import threading

from tfprof.agent.inprocess import frames
from tfprof.core.code_stacks import StackBatch

Frame = tuple[str, int, str]


class Outlet:
    def __init__(self, accept: bool = True) -> None:
        self.strings = frames.StringTable()
        self.names: list[str] = [""]
        self.accept = accept
        self.warnings: list[str] = []
        self.frames: dict[int, tuple[str, int, str, int]] = {}
        self.nodes: dict[int, tuple[int, int]] = {}
        self.samples: list[dict[str, int]] = []
        self.dropped = 0
        self.batches = 0
        self._lock = threading.Lock()

    def intern(self, name: str) -> int:
        return self.strings.intern(name)

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def submit_stacks(self, batch: StackBatch, wait: bool = False) -> bool:
        with self._lock:
            if not self.accept:
                return False
            base, pending = self.strings.take_pending()
            frame = frames.encode_stacks_frame(batch, base, pending)
            decoded = frames.decode_stacks(frame[frames.HEADER.size :])
            self.names[decoded.string_base :] = decoded.strings
            got = decoded.batch
            for i in range(got.num_frames):
                f = got.frames
                self.frames[got.frame_base + i] = (
                    self.names[f["file"][i]], f["line"][i], self.names[f["function"][i]],
                    f["first_line"][i],
                )  # fmt: skip
            for i in range(got.num_nodes):
                self.nodes[got.node_base + i] = (got.nodes["parent"][i], got.nodes["frame"][i])
            for i in range(len(got)):
                self.samples.append({k: v[i] for k, v in got.samples.items()})
            self.dropped = got.dropped
            self.batches += 1
            return True

    def stack(self, node: int) -> list[Frame]:
        """The stack of a node, outermost frame first."""
        out: list[Frame] = []
        while node:
            parent, frame = self.nodes[node]
            file, line, function, _ = self.frames[frame]
            out.append((file, line, function))
            node = parent
        return out[::-1]

    def functions(self, node: int) -> list[str]:
        return [function for _, _, function in self.stack(node)]
