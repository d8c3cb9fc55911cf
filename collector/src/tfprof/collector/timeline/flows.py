"""Launch flows: each GPU record linked to the CUDA API call that launched it.

CUPTI gives the API call and the activity it caused one correlation id, unique within a
process. So, per process: a kernel, copy, memset or sync whose correlation is carried by
exactly one API record is linked to it. Correlation 0 means "unknown" and never links;
a GPU record whose correlation no API record carries (the call fell outside the window,
was not traced, or was dropped) or several do (a damaged stream) stays unlinked and is
counted: links are never guessed.

Pure and columnar: record columns in, row indices out (numpy sort + searchsorted).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfprof.core.records import RecordKind

# The GPU activity an API call launches (syncs too: their call is the host's wait).
LAUNCHED_KINDS = (RecordKind.KERNEL, RecordKind.MEMCPY, RecordKind.MEMSET, RecordKind.SYNC)


@dataclass(frozen=True)
class LaunchLinks:
    """One process's links: ``gpu[i]`` was launched by API record ``api[i]`` (row indices)."""

    gpu: np.ndarray
    api: np.ndarray
    unknown: int  # GPU records with correlation 0
    missing: int  # GPU records whose correlation no API record carries
    ambiguous: int  # GPU records whose correlation several API records carry

    def __len__(self) -> int:
        return int(self.gpu.shape[0])

    def stats(self) -> dict[str, int]:
        """Counts for trace metadata: what was linked and what was not, by why."""
        return {
            "linked": len(self),
            "unknown_correlation": self.unknown,
            "missing_api": self.missing,
            "ambiguous_api": self.ambiguous,
        }


def is_launched(kind: np.ndarray) -> np.ndarray:
    """Which rows are GPU activity an API call launches."""
    return np.isin(kind, np.array(LAUNCHED_KINDS, dtype=kind.dtype))


def link_launches(kind: np.ndarray, correlation: np.ndarray) -> LaunchLinks:
    """Link the GPU records among these rows (one process) to their API records."""
    api_rows = np.flatnonzero((kind == RecordKind.API) & (correlation != 0))
    api_corr = correlation[api_rows]
    order = np.argsort(api_corr, kind="stable")
    api_rows, api_corr = api_rows[order], api_corr[order]

    gpu_rows = np.flatnonzero(is_launched(kind))
    gpu_corr = correlation[gpu_rows]
    known = gpu_corr != 0
    unknown = int(gpu_rows.shape[0] - np.count_nonzero(known))
    gpu_rows, gpu_corr = gpu_rows[known], gpu_corr[known]

    lo = np.searchsorted(api_corr, gpu_corr, side="left")
    hi = np.searchsorted(api_corr, gpu_corr, side="right")
    count = hi - lo
    one = count == 1
    return LaunchLinks(
        gpu=gpu_rows[one],
        api=api_rows[lo[one]],
        unknown=unknown,
        missing=int(np.count_nonzero(count == 0)),
        ambiguous=int(np.count_nonzero(count > 1)),
    )
