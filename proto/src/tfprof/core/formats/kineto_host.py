"""The host side of PyTorch Kineto traces: API calls, op ranges, memory and launch flows.

- ``cuda_runtime`` / ``cuda_driver`` complete events: API records on their thread
  (``tid``) with ``correlation``, ``cbid`` and ``category`` 1 (runtime) or 2 (driver);
- ``cpu_op`` / ``user_annotation`` ranges: MARKER records on their thread, ``category``
  the interned Kineto category;
- ``gpu_user_annotation`` ranges: MARKER records on a GPU stream (thread 0, ``device``
  and ``stream`` from ``pid``/``tid`` as Kineto writes them);
- ``[memory]`` instants of CUDA memory (``Device Type`` 1): MEMORY records, an
  allocation when ``Bytes`` is positive, a release when negative;
- ``ac2g`` flow events (``s`` at the launch, ``f`` at the GPU activity, ``id`` the
  correlation) are not records: ``check_flows`` counts how many of them agree with the
  links the correlation ids draw, and the flow events whose partner is missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfprof.core.formats.trace import Event, TraceBuilder, event_args, non_negative
from tfprof.core.records import COLUMN_INDEX, RecordKind

API_RUNTIME = 1  # ``category`` of API records: CUPTI's RUNTIME activity kind
API_DRIVER = 2  # and DRIVER
_API_CATEGORIES = {"cuda_runtime": API_RUNTIME, "cuda_driver": API_DRIVER}
_HOST_RANGES = ("cpu_op", "user_annotation")
_GPU_RANGE = "gpu_user_annotation"
_MEMORY_EVENT = "[memory]"
_CUDA_DEVICE_TYPE = 1  # c10::DeviceType::CUDA
_FLOW_CATEGORY = "ac2g"
_MEMORY_ALLOCATION, _MEMORY_RELEASE = 1, 2  # CUpti_ActivityMemoryOperationType
_GPU_KINDS = (RecordKind.KERNEL, RecordKind.MEMCPY, RecordKind.MEMSET, RecordKind.SYNC)


def external_id(args: Mapping[str, Any]) -> int:
    """Kineto's ``External id`` (the op a record belongs to), 0 when absent."""
    return non_negative(args.get("External id", args.get("external id")))


def read_host_event(category: str, e: Event, out: TraceBuilder) -> None:
    """One non-GPU Kineto event as a host record, when it is one we read."""
    ph = e.get("ph")
    if ph == "X" and category in _API_CATEGORIES:
        _add_api(_API_CATEGORIES[category], e, out)
    elif ph == "X" and category in _HOST_RANGES:
        args = event_args(e)
        out.add(
            RecordKind.MARKER,
            e,
            thread=non_negative(e.get("tid")),
            name=out.name(str(e.get("name", ""))),
            category=out.name(category),
            external_id=external_id(args),
        )
    elif ph == "X" and category == _GPU_RANGE:
        args = event_args(e)
        out.add(
            RecordKind.MARKER,
            e,
            device=non_negative(args.get("device"), non_negative(e.get("pid"))),
            stream=non_negative(args.get("stream"), non_negative(e.get("tid"))),
            name=out.name(str(e.get("name", ""))),
            category=out.name(category),
            external_id=external_id(args),
        )
    elif ph == "i" and e.get("name") == _MEMORY_EVENT:
        _add_memory(e, out)


def _add_api(category: int, e: Event, out: TraceBuilder) -> None:
    args = event_args(e)
    out.add(
        RecordKind.API,
        e,
        thread=non_negative(e.get("tid")),
        correlation=non_negative(args.get("correlation")),
        cbid=non_negative(args.get("cbid")),
        name=out.name(str(e.get("name", ""))),
        category=category,
        external_id=external_id(args),
    )


def _add_memory(e: Event, out: TraceBuilder) -> None:
    args = event_args(e)
    if non_negative(args.get("Device Type"), -1) != _CUDA_DEVICE_TYPE:
        return  # host memory: not the device memory this record kind counts
    signed = args.get("Bytes")
    size = non_negative(signed, -1)
    if size < 0:  # a release: Kineto writes its size negative
        size = non_negative(-signed if isinstance(signed, int) else None, 0)
        op = _MEMORY_RELEASE
    else:
        op = _MEMORY_ALLOCATION
    out.add(
        RecordKind.MEMORY,
        e,
        device=non_negative(args.get("Device Id")),
        thread=non_negative(e.get("tid")),
        bytes=size,
        address=non_negative(args.get("Addr")),
        memory_op=op,
    )


def check_flows(events: list[Event], out: TraceBuilder) -> None:
    """Count ``ac2g`` flows against the links correlation ids draw in ``out``'s records.

    A flow (an ``s`` and an ``f`` with one ``id``) agrees when an API record and a GPU
    record both carry that id as their correlation; flow events without a partner are
    counted, never matched by guess.
    """
    starts: set[Any] = set()
    finishes: set[Any] = set()
    for e in events:
        if e.get("cat") != _FLOW_CATEGORY:
            continue
        ph = e.get("ph")
        if ph == "s":
            starts.add(e.get("id"))
        elif ph in ("f", "t"):
            finishes.add(e.get("id"))
    if not starts and not finishes:
        return
    kind_i, corr_i = COLUMN_INDEX["kind"], COLUMN_INDEX["correlation"]
    api = {r[corr_i] for r in out.rows if r[kind_i] == RecordKind.API}
    gpu = {r[corr_i] for r in out.rows if r[kind_i] in _GPU_KINDS}
    pairs = starts & finishes
    linked = sum(1 for i in pairs if non_negative(i) in api and non_negative(i) in gpu)
    out.flow_stats.update(
        flows=len(pairs),
        flows_agreeing=linked,
        flows_disagreeing=len(pairs) - linked,
        flow_starts_without_finish=len(starts - finishes),
        flow_finishes_without_start=len(finishes - starts),
    )
