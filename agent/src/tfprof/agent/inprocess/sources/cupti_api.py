"""Which CUDA API calls become API records, and what each is called.

CUPTI records every runtime (or driver) call once the RUNTIME (DRIVER) activity kind is
on, getters included: ``cudaGetDevice`` and ``cudaGetLastError`` alone can outnumber the
launches several times over. As Kineto does, the kinds are enabled and then every
callback id outside the families a system engineer reads is switched off one by one
(``cupti.activity_enable_runtime_api(cbid, 0)``): launches, graph launches, copies,
memsets, synchronisation, event record/wait, allocation and free.

Names come from cupti-python's callback-id enums (``RuntimeApiTraceCbid``,
``DriverApiTraceCbid``), whose runtime members carry the API version they appeared in
(``cudaLaunchKernel_v7000``): that suffix is dropped, as Nsight Systems and Kineto show
the names. Driver names keep theirs (``cuMemAlloc_v2`` is the real function name).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from types import ModuleType

from tfprof.core.cupti_labels import API_DRIVER, API_RUNTIME

# Name prefixes (after the version suffix is dropped) of the calls recorded.
RUNTIME_FAMILIES = (
    "cudaLaunch",  # cudaLaunchKernel, cudaLaunchKernelExC, cudaLaunchCooperativeKernel...
    "cudaGraphLaunch",
    "cudaMemcpy",  # and its _ptds/_ptsz per-thread-stream variants, Async, Peer, 2D...
    "cudaMemset",
    "cudaMemPrefetchAsync",
    "cudaDeviceSynchronize",
    "cudaThreadSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "cudaStreamWaitEvent",
    "cudaEventRecord",
    "cudaMalloc",  # cudaMalloc, cudaMallocHost, cudaMallocManaged, cudaMallocAsync...
    "cudaFree",  # cudaFree, cudaFreeHost, cudaFreeAsync, cudaFreeArray
    "cudaHostAlloc",
    "cudaHostRegister",
    "cudaHostUnregister",
)
DRIVER_FAMILIES = (
    "cuLaunch",  # cuLaunchKernel(Ex), cuLaunchCooperativeKernel, cuLaunchHostFunc...
    "cuGraphLaunch",
    "cuMemcpy",
    "cuMemset",
    "cuMemPrefetchAsync",
    "cuCtxSynchronize",
    "cuStreamSynchronize",
    "cuEventSynchronize",
    "cuStreamWaitEvent",
    "cuEventRecord",
    "cuMemAlloc",  # cuMemAlloc_v2, cuMemAllocHost, cuMemAllocManaged, cuMemAllocAsync...
    "cuMemFree",
    "cuMemHostAlloc",
    "cuMemHostRegister",
    "cuMemHostUnregister",
    # The virtual memory management calls allocators built on it make (PyTorch's
    # expandable segments).
    "cuMemCreate",
    "cuMemRelease",
    "cuMemMap",
    "cuMemUnmap",
)
# Members of the enums that are not functions.
_NOT_FUNCTIONS = ("INVALID", "SIZE", "FORCE_INT")
_RUNTIME_VERSION = re.compile(r"_v\d{4,5}$")


def api_name(category: int, member: str) -> str:
    """The function name shown for an enum member: ``cudaLaunchKernel_v7000`` ->
    ``cudaLaunchKernel``; driver members unchanged."""
    return _RUNTIME_VERSION.sub("", member) if category == API_RUNTIME else member


def _members(cupti: ModuleType, category: int) -> Iterator[tuple[int, str]]:
    enum = cupti.RuntimeApiTraceCbid if category == API_RUNTIME else cupti.DriverApiTraceCbid
    for member, value in enum.__members__.items():
        if member not in _NOT_FUNCTIONS:
            yield int(value), member


def is_recorded(category: int, name: str) -> bool:
    families = RUNTIME_FAMILIES if category == API_RUNTIME else DRIVER_FAMILIES
    return name.startswith(families)


class ApiNames:
    """cbid -> function name of both APIs, read once from cupti-python's enums."""

    def __init__(self, cupti: ModuleType) -> None:
        self._names: dict[tuple[int, int], str] = {}
        for category in (API_RUNTIME, API_DRIVER):
            for cbid, member in _members(cupti, category):
                self._names[(category, cbid)] = api_name(category, member)

    def name(self, category: int, cbid: int) -> str:
        """The function name; an id this cupti-python does not know is shown as such."""
        found = self._names.get((category, cbid))
        if found is None:
            prefix = "cuda" if category == API_RUNTIME else "cu"
            return f"{prefix}Api#{cbid}"
        return found

    def unrecorded(self, category: int) -> list[int]:
        """The callback ids of ``category`` to switch off: every one outside the
        recorded families."""
        return sorted(
            cbid
            for (cat, cbid), name in self._names.items()
            if cat == category and not is_recorded(category, name)
        )


def apply_filter(cupti: ModuleType, names: ApiNames, category: int) -> int:
    """Switch off the unrecorded callback ids of ``category`` (its activity kind is on);
    the number switched off. Raises what cupti-python raises: a CUPTI without per-id
    filtering then records every call of the kind, which the caller may accept."""
    switch = (
        cupti.activity_enable_runtime_api
        if category == API_RUNTIME
        else cupti.activity_enable_driver_api
    )
    off = names.unrecorded(category)
    for cbid in off:
        switch(cbid, 0)
    return len(off)
