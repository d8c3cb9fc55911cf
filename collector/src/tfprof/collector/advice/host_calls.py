"""What the host-side rules share: which CUDA API calls make the host wait for the GPU,
and the union of a job's calls as intervals."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from tfprof.collector.analysis.intervals import Merged, merge_intervals
from tfprof.collector.analysis.records import RecordSet
from tfprof.core.records import RecordKind

# Calls that block the host until the GPU has done something: explicit synchronisation
# (cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize, cuCtxSynchronize,
# ...) and synchronous copies (cudaMemcpy, cudaMemcpy2D, cuMemcpyDtoH_v2: no "Async").
SYNC_CALL = re.compile(r"Synchronize|^cu(da)?Memcpy(?!.*Async)")


def is_sync_call(names: Sequence[str]) -> np.ndarray:
    """Per name: whether it names a synchronising call."""
    return np.array([bool(SYNC_CALL.search(n)) for n in names], dtype=bool)


def sync_names(rs: RecordSet) -> np.ndarray:
    """Per names id: whether it names a synchronising call."""
    return is_sync_call(rs.names)


def api_calls(rs: RecordSet, sync_only: bool = False) -> np.ndarray:
    """Rows of ``rs.host`` that are API calls (synchronising ones only, with ``sync_only``)."""
    h = rs.host
    calls = h.kind == RecordKind.API
    if sync_only:
        calls &= sync_names(rs)[h.name]
    return np.flatnonzero(calls)


def calls_by_job(rs: RecordSet, rows: np.ndarray) -> Merged:
    """The union of the given API calls' intervals per job (all its threads)."""
    h = rs.host
    return merge_intervals(h.job[rows], h.start[rows], h.end[rows], len(rs.jobs))
