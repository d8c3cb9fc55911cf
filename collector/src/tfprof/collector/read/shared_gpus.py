"""Which processes share a GPU, and one key per GPU: the read's view of physical GPUs
before they are numbered. CUDA ordinals are per process; a GPU is known by the UUID a
process's hello names for an ordinal (``host/gpu:N`` when it names none).

- ``components``: the processes that share a GPU, swept together in start order;
- ``GpuKeys``: a dense key per GPU UUID for (process, ordinal) pairs, for sweeps that
  key state by GPU before ``Read`` lists the GPUs.
"""

from __future__ import annotations

import numpy as np

from tfprof.collector.read.lake_catalog import Catalog


class GpuKeys:
    """A dense key per GPU UUID for (process, CUDA ordinal) pairs, grown as ordinals a
    hello never named turn up (``host/gpu:N``)."""

    def __init__(self, cat: Catalog) -> None:
        self.cat = cat
        self.uuids: list[str] = []
        self.process_of: list[int] = []  # per key: the first process seen on it
        self._index: dict[str, int] = {}
        self._lut = np.full((len(cat.processes), 1), -1, dtype=np.int64)

    def __call__(self, process: np.ndarray, device: np.ndarray) -> np.ndarray:
        top = int(device.max()) if device.shape[0] else 0
        if top >= self._lut.shape[1]:
            more = np.full((self._lut.shape[0], top + 1 - self._lut.shape[1]), -1, np.int64)
            self._lut = np.concatenate([self._lut, more], axis=1)
        keys: np.ndarray = self._lut[process, device]
        new = keys < 0
        if new.any():
            for p, d in set(zip(process[new].tolist(), device[new].tolist(), strict=True)):
                self._lut[p, d] = self.key(p, d)
            keys = self._lut[process, device]
        return keys

    def key(self, process: int, ordinal: int) -> int:
        uuid = self.cat.streams[process].device_uuid(ordinal)
        if uuid not in self._index:
            self._index[uuid] = len(self.uuids)
            self.uuids.append(uuid)
            self.process_of.append(process)
        return self._index[uuid]


def components(cat: Catalog) -> list[tuple[int, ...]]:
    """The processes that share a GPU, in load order: by the UUIDs their hellos name,
    and by host for ordinals without one (``host/gpu:N`` could be any of them)."""
    parent = list(range(len(cat.processes)))

    def root(p: int) -> int:
        while parent[p] != p:
            parent[p] = parent[parent[p]]
            p = parent[p]
        return p

    owner: dict[str, int] = {}
    for p, stream in enumerate(cat.streams):
        named = [d.uuid for d in stream.devices.values() if d.uuid]
        keys = named if len(named) == len(stream.devices) and named else [f"host:{stream.host}"]
        keys += named
        for key in keys:
            if key in owner:
                parent[root(p)] = root(owner[key])
            else:
                owner[key] = p
    groups: dict[int, list[int]] = {}
    for p in cat.load_order:
        groups.setdefault(root(p), []).append(p)
    return [tuple(g) for g in groups.values()]
