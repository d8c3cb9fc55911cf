"""A stream's Python stacks, batch by batch, as rows of the lake's ``stacks`` and
``stack_samples`` tables (docs/concepts/code-attribution.md).

Frames and stack nodes are defined once per stream, in id order, and a node's row names
its innermost frame: ``StackRows`` keeps every frame and each node's depth from the
batches read so far (as the cursor keeps the string table), so a compaction range can
write its nodes whatever batch defined their frames. A frame or parent that no batch
defined (its batch was lost, and counted) reads as an unknown frame, depth 0.
"""

from __future__ import annotations

import numpy as np

from tfprof.proto import collector_pb2 as pb

FRAME_FIELDS = ("file", "line", "function", "first_line")
STACK_COLUMNS = ("stack_id", "parent_id", "depth", "frame_id", *FRAME_FIELDS)
SAMPLE_COLUMNS = ("time_ns", "thread", "stack_id", "kind", "correlation")
_SAMPLE_SOURCES = {"time_ns": "time_ns", "thread": "thread", "stack_id": "stack",
                   "kind": "kind", "correlation": "correlation"}  # fmt: skip


def _grow(array: np.ndarray, size: int) -> np.ndarray:
    if size <= len(array):
        return array
    grown = np.zeros(max(size, 2 * len(array)), dtype=array.dtype)
    grown[: len(array)] = array
    return grown


class StackRows:
    """What earlier batches defined, and the rows of the batches being collected."""

    def __init__(self) -> None:
        # by frame id: string index of file and function, line, first line (0: unknown)
        self.frames = {f: np.zeros(64, np.int64) for f in FRAME_FIELDS}
        self.depth = np.zeros(256, np.int64)  # by node id
        self.dropped = 0  # the latest cumulative count of samples the hook lost
        self.stacks: dict[str, list[np.ndarray]] = {c: [] for c in STACK_COLUMNS}
        self.samples: dict[str, list[np.ndarray]] = {c: [] for c in SAMPLE_COLUMNS}

    def absorb(self, stacks: pb.Stacks, collect: bool, time_shift: int) -> None:
        """Learn a batch's frames and nodes; with ``collect``, keep its rows (sample
        times moved by ``time_shift`` onto the collector clock)."""
        self.dropped = max(self.dropped, stacks.dropped_samples)
        n = len(stacks.frame_file)
        if n:
            at = stacks.frame_base + np.arange(n)
            for name in FRAME_FIELDS:
                self.frames[name] = _grow(self.frames[name], int(at[-1]) + 1)
                self.frames[name][at] = np.array(getattr(stacks, f"frame_{name}"), np.int64)
        nodes = len(stacks.node_parent)
        if nodes:
            ids = stacks.node_base + np.arange(nodes, dtype=np.int64)
            parents = np.array(stacks.node_parent, np.int64)
            self.depth = _grow(self.depth, int(ids[-1]) + 1)
            depth = self.depth
            for i, parent in zip(ids.tolist(), parents.tolist(), strict=True):  # parents come first
                if parent == 0:
                    depth[i] = 1
                elif 0 < parent < len(depth) and depth[parent]:
                    depth[i] = depth[parent] + 1
            if collect:
                self._collect_nodes(ids, parents, np.array(stacks.node_frame, np.int64))
        if collect and len(stacks.stack):
            self._collect_samples(stacks, time_shift)

    def _collect_nodes(self, ids: np.ndarray, parents: np.ndarray, frames: np.ndarray) -> None:
        out = self.stacks
        out["stack_id"].append(ids)
        out["parent_id"].append(parents)
        out["depth"].append(self.depth[ids])
        out["frame_id"].append(frames)
        known = frames < len(self.frames["file"])
        for name in FRAME_FIELDS:
            values = np.zeros(len(frames), np.int64)
            values[known] = self.frames[name][frames[known]]
            out[name].append(values)

    def _collect_samples(self, stacks: pb.Stacks, time_shift: int) -> None:
        n = len(stacks.stack)
        for column, source in _SAMPLE_SOURCES.items():
            values = getattr(stacks, source)
            part = np.array(values, np.int64) if len(values) else np.zeros(n, np.int64)
            if column == "time_ns":
                part += time_shift
            self.samples[column].append(part)

    def take(self) -> tuple[dict[str, np.ndarray] | None, dict[str, np.ndarray] | None]:
        """(stack rows, sample rows) collected since the last take, as columns."""
        stacks = samples = None
        if self.stacks["stack_id"]:
            stacks = {c: np.concatenate(parts) for c, parts in self.stacks.items()}
        if self.samples["time_ns"]:
            samples = {c: np.concatenate(parts) for c, parts in self.samples.items()}
        self.stacks = {c: [] for c in STACK_COLUMNS}
        self.samples = {c: [] for c in SAMPLE_COLUMNS}
        return stacks, samples
