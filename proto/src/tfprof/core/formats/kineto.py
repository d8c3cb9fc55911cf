"""PyTorch Kineto traces into records.

GPU events have ``cat`` ``kernel`` / ``gpu_memcpy`` / ``gpu_memset``, and ``cuda_sync``
(SYNC records, when it names a device); CPU-side cats are ignored. Device, stream,
context and correlation come from ``args`` (falling back to pid/tid); kernels take
grid, block, "registers per thread" and "shared memory" (Kineto prints static + dynamic
as one total; it goes to ``static_smem`` so the sum stays right), through the slice-arg
table our own exports share. Copies parse kind and memory kinds from
"Memcpy HtoD (Pageable -> Device)"; memsets take the memory kind from
"Memset (Device)" into ``src_kind`` (as ``RecordTable.add_memset`` does). ``bytes`` is
``args.bytes``, else bandwidth × duration. Device names come from ``deviceProperties``.

The host side (``kineto_host``) goes through the same columns: ``cuda_runtime`` and
``cuda_driver`` calls become API records, ``cpu_op`` / ``user_annotation`` ranges and
``gpu_user_annotation`` ranges (on a GPU stream) MARKER records, ``[memory]`` instants
of CUDA memory MEMORY records, and ``ac2g`` flow events are checked against the
correlation links they draw. Every record keeps Kineto's ``External id``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from typing import Any

from tfprof.core.cupti_labels import COPY_KINDS, MEMORY_KINDS, SYNC_TYPES
from tfprof.core.formats.kineto_host import (
    API_RUNTIME,
    FLOW_CATEGORY,
    HostSide,
    event_name,
    external_id,
)
from tfprof.core.formats.trace import Event, TraceBuilder, arg_columns, event_args, non_negative
from tfprof.core.records import SYNC_NO_STREAM, DeviceInfo, RecordKind
from tfprof.core.slice_args import args_of

_CATEGORIES = {
    "kernel": RecordKind.KERNEL,
    "gpu_memcpy": RecordKind.MEMCPY,
    "gpu_memset": RecordKind.MEMSET,
    # Kineto before PyTorch 1.10 capitalised these.
    "memcpy": RecordKind.MEMCPY,
    "memset": RecordKind.MEMSET,
}
_SYNC_CATEGORY = "cuda_sync"
_API_RUNTIME, _API_DRIVER, _HOST_RANGE = "cuda_runtime", "cuda_driver", "cpu_op"
_MEMCPY = re.compile(r"Memcpy\s+(\w+)\s*\(([^)]*?)\s*->\s*([^)]*?)\)", re.IGNORECASE)
_MEMSET = re.compile(r"Memset\s*\(([^)]*)\)", re.IGNORECASE)


def _category(e: Event) -> str:
    return str(e.get("cat", "")).lower()


def is_gpu_category(category: str) -> bool:
    """Whether a (lower-cased) ``cat`` is one of Kineto's GPU activity categories."""
    return category in _CATEGORIES


def is_kineto(events: Iterable[Event]) -> bool:
    return any(_category(e) in _CATEGORIES for e in events)


def read_kineto(meta: dict[str, Any], events: Iterable[Event], out: TraceBuilder) -> None:
    reader = KinetoReader(out)
    reader.feed(events)
    reader.finish(meta)


class KinetoReader:
    """Reads Kineto events a chunk at a time, in file order (records keep that order)."""

    def __init__(self, out: TraceBuilder) -> None:
        self.out = out
        self.host = HostSide(out)
        # raw ``cat`` value -> its lower-cased text: the same few values repeat a million times
        self._categories: dict[Any, str] = {}
        self._copy_labels: dict[str, tuple[int, ...]] = {}

    def _category_of(self, raw: Any) -> str:
        try:
            return self._categories[raw]
        except KeyError:
            category = self._categories[raw] = str(raw).lower()
            return category
        except TypeError:  # an unhashable cat (a list, an object): not one we know
            return str(raw).lower()

    def feed(self, events: Iterable[Event]) -> None:
        host = self.host
        add_api, add_range, add_host, add_flow = (
            host.add_api, host.add_range, host.add, host.add_flow
        )  # fmt: skip
        categories = self._categories
        category_of = self._category_of
        for e in events:
            raw = e.get("cat", "")
            category = categories.get(raw) if type(raw) is str else None
            if category is None:
                category = category_of(raw)
            if category == _API_RUNTIME:
                if e.get("ph") == "X":
                    add_api(API_RUNTIME, e)
                else:
                    add_host(category, e)
            elif category == _HOST_RANGE:
                if e.get("ph") == "X":
                    add_range(category, e)
                else:
                    add_host(category, e)
            elif raw == FLOW_CATEGORY:
                add_flow(e)
                add_host(category, e)
            elif category == _SYNC_CATEGORY:
                self._add_sync(e)
            elif category in _CATEGORIES:
                if e.get("ph") == "X":
                    self._add_gpu(_CATEGORIES[category], e)
            else:
                add_host(category, e)

    def finish(self, meta: dict[str, Any]) -> None:
        """After the last event: flows checked, devices described from ``meta``."""
        self.host.check_flows()
        properties = meta.get("deviceProperties")
        for prop in properties if isinstance(properties, list) else []:
            if isinstance(prop, dict):
                info = self.out.devices.get(non_negative(prop.get("id"), -1))
                if info is not None:  # else listed but idle in this trace
                    _describe(info, prop)

    def _add_gpu(self, kind: RecordKind, e: Event) -> None:
        out = self.out
        args = event_args(e)
        name = event_name(e)
        values = arg_columns(args, args_of(kind))
        values.update(
            device=non_negative(args.get("device"), non_negative(e.get("pid"))),
            stream=non_negative(args.get("stream"), non_negative(e.get("tid"))),
            name=out.name(name),
            external_id=external_id(args),
        )
        if kind != RecordKind.KERNEL:
            values["bytes"] = _bytes(args, out.ns(e, "dur"))
        if kind == RecordKind.MEMCPY:
            labels = self._copy_labels.get(name)
            if labels is None:
                m = _MEMCPY.search(name)
                labels = self._copy_labels[name] = (
                    (
                        COPY_KINDS.parse(m.group(1)),
                        MEMORY_KINDS.parse(m.group(2)),
                        MEMORY_KINDS.parse(m.group(3)),
                    )
                    if m
                    else ()
                )
            if labels:
                values["copy_kind"], values["src_kind"], values["dst_kind"] = labels
        elif kind == RecordKind.MEMSET and (m := _MEMSET.search(name)):
            values["src_kind"] = MEMORY_KINDS.parse(m.group(1))
        out.add(kind, e, **values)

    def _add_sync(self, e: Event) -> None:
        """A ``cuda_sync`` event (Kineto's CUPTI SYNCHRONIZATION record) as a SYNC record.

        Only with a device in args: older Kineto wrote syncs without one. ``stream`` -1 (an
        event or context synchronisation) becomes CUPTI's invalid value, ``SYNC_NO_STREAM``.
        """
        args = event_args(e)
        if e.get("ph") != "X" or non_negative(args.get("device"), -1) < 0:
            return
        raw_stream = args.get("stream")
        stream = (
            SYNC_NO_STREAM if raw_stream in (None, -1) else non_negative(raw_stream, SYNC_NO_STREAM)
        )
        label = str(args.get("cuda_sync_kind") or e.get("name") or "")
        self.out.add(
            RecordKind.SYNC,
            e,
            device=non_negative(args.get("device")),
            stream=stream,
            context=non_negative(args.get("context")),
            correlation=non_negative(args.get("correlation")),
            name=self.out.name(str(e.get("name", ""))),
            sync_type=SYNC_TYPES.parse(label),
            external_id=external_id(args),
        )


def _describe(info: DeviceInfo, prop: dict[str, Any]) -> None:
    """Fill ``info`` from one of Kineto's ``deviceProperties``."""
    if isinstance(prop.get("name"), str):
        info["name"] = prop["name"]
    if "computeMajor" in prop:
        info["compute_capability_major"] = non_negative(prop["computeMajor"])
    if "computeMinor" in prop:
        info["compute_capability_minor"] = non_negative(prop["computeMinor"])
    if "numSms" in prop:
        info["sm_count"] = non_negative(prop["numSms"])
    if "totalGlobalMem" in prop:
        info["memory_bytes"] = non_negative(prop["totalGlobalMem"])


def _bytes(args: dict[str, Any], dur_ns: int) -> int:
    if "bytes" in args:
        return non_negative(args["bytes"])
    try:
        gbps = Decimal(str(args.get("memory bandwidth (GB/s)")))
    except InvalidOperation:
        return 0
    if not gbps.is_finite() or gbps < 0:
        return 0
    return int((gbps * dur_ns).to_integral_value())  # 1 GB/s moves 1 byte per ns
