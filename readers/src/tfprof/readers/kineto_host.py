"""The host side of PyTorch Kineto traces: API calls, op ranges, memory and launch flows.

- ``cuda_runtime`` / ``cuda_driver`` complete events: API records on their thread
  (``tid``) with ``correlation``, ``cbid`` and ``category`` 1 (runtime) or 2 (driver);
- ``cpu_op`` / ``user_annotation`` ranges: MARKER records on their thread, ``category``
  the interned Kineto category (``collective`` set on those with collective args);
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

from tfprof.core.records import RecordKind
from tfprof.readers.event_fields import non_negative
from tfprof.readers.trace import Event
from tfprof.readers.trace_builder import TraceBuilder

API_RUNTIME = 1  # ``category`` of API records: CUPTI's RUNTIME activity kind
API_DRIVER = 2  # and DRIVER
API_CATEGORIES = {"cuda_runtime": API_RUNTIME, "cuda_driver": API_DRIVER}
HOST_RANGES = ("cpu_op", "user_annotation")
GPU_RANGE = "gpu_user_annotation"
_MEMORY_EVENT = "[memory]"
_CUDA_DEVICE_TYPE = 1  # c10::DeviceType::CUDA
FLOW_CATEGORY = "ac2g"
_MEMORY_ALLOCATION, _MEMORY_RELEASE = 1, 2  # CUpti_ActivityMemoryOperationType
_GPU_KINDS = (RecordKind.KERNEL, RecordKind.MEMCPY, RecordKind.MEMSET, RecordKind.SYNC)


def external_id(args: Mapping[str, Any]) -> int:
    """Kineto's ``External id`` (the op a record belongs to), 0 when absent."""
    value = args["External id"] if "External id" in args else args.get("external id")
    return value if type(value) is int and value >= 0 else non_negative(value)


def event_name(e: Event) -> str:
    name = e.get("name", "")
    return name if type(name) is str else str(name)


class HostSide:
    """The host records of one Kineto trace, appended in the order the reader meets them,
    and the ``ac2g`` flow ids it saw. API calls and host ranges, most of a trace, are
    appended to ``api`` and ``ranges`` by the reader's own loop (``kineto.KinetoReader``)."""

    def __init__(self, out: TraceBuilder) -> None:
        self.out = out
        self.api = out.layout(
            RecordKind.API, "thread", "correlation", "cbid", "name", "category", "external_id"
        )
        self.ranges = out.layout(RecordKind.MARKER, "thread", "name", "category", "external_id")
        # Ranges with collective args (record_param_comms): the collective they issued.
        self.comm_ranges = out.layout(
            RecordKind.MARKER, "thread", "name", "category", "external_id", "collective"
        )
        self.gpu_ranges = out.layout(
            RecordKind.MARKER, "device", "stream", "name", "category", "external_id"
        )
        self.memory = out.layout(
            RecordKind.MEMORY, "device", "thread", "bytes", "address", "memory_op"
        )
        self.flow_starts: set[Any] = set()
        self.flow_finishes: set[Any] = set()

    def add(self, category: str, e: Event) -> None:
        """One non-GPU Kineto event other than an API call or a host range (which the
        reader's loop adds itself) as a host record, when it is one we read."""
        ph = e.get("ph")
        if ph == "X":
            if category == GPU_RANGE:
                self._add_gpu_range(category, e)
        elif ph == "i" and e.get("name") == _MEMORY_EVENT:
            self._add_memory(e)

    def _add_gpu_range(self, category: str, e: Event) -> None:
        args = e.get("args")
        if not isinstance(args, dict):
            args = {}
        out = self.out
        device = non_negative(args.get("device"), non_negative(e.get("pid")))
        stream = non_negative(args.get("stream"), non_negative(e.get("tid")))
        name = out.name(event_name(e))
        self.gpu_ranges.values.extend(
            (*out.times(e), device, stream, name, out.name(category), external_id(args))
        )
        out.order.append(self.gpu_ranges.id)
        out.add_device(device)

    def _add_memory(self, e: Event) -> None:
        args = e.get("args")
        if not isinstance(args, dict):
            args = {}
        if non_negative(args.get("Device Type"), -1) != _CUDA_DEVICE_TYPE:
            return  # host memory: not the device memory this record kind counts
        signed = args.get("Bytes")
        size = non_negative(signed, -1)
        if size < 0:  # a release: Kineto writes its size negative
            size = non_negative(-signed if isinstance(signed, int) else None, 0)
            op = _MEMORY_RELEASE
        else:
            op = _MEMORY_ALLOCATION
        out = self.out
        device = non_negative(args.get("Device Id"))
        thread = non_negative(e.get("tid"))
        address = non_negative(args.get("Addr"))
        self.memory.values.extend((*out.times(e), device, thread, size, address, op))
        out.order.append(self.memory.id)
        out.add_device(device)

    def check_flows(self) -> None:
        """Count ``ac2g`` flows against the links correlation ids draw in the records.

        A flow (an ``s`` and an ``f`` with one ``id``) agrees when an API record and a GPU
        record both carry that id as their correlation; flow events without a partner are
        counted, never matched by guess.
        """
        starts, finishes = self.flow_starts, self.flow_finishes
        if not starts and not finishes:
            return
        out = self.out
        api = out.column_values((RecordKind.API,), "correlation")
        gpu = out.column_values(_GPU_KINDS, "correlation")
        pairs = starts & finishes
        both = api & gpu
        linked = sum(1 for i in pairs if non_negative(i) in both)
        out.flow_stats.update(
            flows=len(pairs),
            flows_agreeing=linked,
            flows_disagreeing=len(pairs) - linked,
            flow_starts_without_finish=len(starts - finishes),
            flow_finishes_without_start=len(finishes - starts),
        )
