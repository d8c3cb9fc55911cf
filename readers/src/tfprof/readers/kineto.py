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

Kernels and host ranges (``record_param_comms``) that carry Kineto's collective args keep
them in the ``collective`` column (``tfprof.core.collectives``). The file's
``distributedInfo`` gives the trace its rank and world size.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from typing import Any

from tfprof.core import collectives
from tfprof.core.cupti_labels import COPY_KINDS, MEMORY_KINDS, SYNC_TYPES
from tfprof.core.records import SYNC_NO_STREAM, DeviceInfo, RecordKind
from tfprof.core.slice_args import ArgType, SliceArg, args_of, parse_value
from tfprof.readers.event_fields import arg_plan, event_args, non_negative
from tfprof.readers.kineto_host import (
    API_CATEGORIES,
    FLOW_CATEGORY,
    HOST_RANGES,
    HostSide,
    event_name,
    external_id,
)
from tfprof.readers.kineto_stacks import PYTHON_FUNCTION, PythonStacks
from tfprof.readers.trace import Event
from tfprof.readers.trace_builder import TraceBuilder

_CATEGORIES = {
    "kernel": RecordKind.KERNEL,
    "gpu_memcpy": RecordKind.MEMCPY,
    "gpu_memset": RecordKind.MEMSET,
    # Kineto before PyTorch 1.10 capitalised these.
    "memcpy": RecordKind.MEMCPY,
    "memset": RecordKind.MEMSET,
}
_SYNC_CATEGORY = "cuda_sync"
_LAUNCHED = (RecordKind.KERNEL, RecordKind.MEMCPY, RecordKind.MEMSET)  # what a launch makes
# Categories only Kineto writes, of host activity (which it writes before the GPU's).
HOST_CATEGORIES = frozenset(
    {"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "python_function", "ac2g"}
)
_MEMCPY = re.compile(r"Memcpy\s+(\w+)\s*\(([^)]*?)\s*->\s*([^)]*?)\)", re.IGNORECASE)
_MEMSET = re.compile(r"Memset\s*\(([^)]*)\)", re.IGNORECASE)


def _category(e: Event) -> str:
    return str(e.get("cat", "")).lower()


def is_gpu_category(category: str) -> bool:
    """Whether a (lower-cased) ``cat`` is one of Kineto's GPU activity categories."""
    return category in _CATEGORIES


def is_kineto(events: Iterable[Event]) -> bool:
    return any(_category(e) in _CATEGORIES for e in events)


def base_time_ns(meta: dict[str, Any]) -> int:
    """Kineto's ``baseTimeNanoseconds``: newer Kineto writes ``ts`` relative to it (an
    epoch instant), so that ranks recorded on different hosts share one clock; 0 when
    absent (older files write the whole time in ``ts``)."""
    base = meta.get("baseTimeNanoseconds")
    return base if type(base) is int and base > 0 else 0


def read_kineto(meta: dict[str, Any], events: Iterable[Event], out: TraceBuilder) -> None:
    reader = KinetoReader(out)
    reader.feed(events)
    reader.finish(meta)


class KinetoReader:
    """Reads Kineto events a chunk at a time, in file order (records keep that order).

    The loop handles the events that make up most of a trace (API calls, host ranges,
    flow ends) itself, with ints taking a shortcut; GPU activity goes through a layout
    compiled per set of arg keys (a trace has a handful).
    """

    def __init__(self, out: TraceBuilder) -> None:
        self.out = out
        self.host = HostSide(out)
        self.stacks = PythonStacks(out)  # python_function events (with_stack=True)
        self.metadata: list[Event] = []  # ``ph: "M"`` events, for format detection
        self.any_gpu = False  # whether any event had a GPU category (``is_kineto``)
        # raw ``cat`` value -> its lower-cased text: the same few values repeat a million times
        self._categories: dict[Any, str] = {}
        self._gpu: dict[tuple[int, tuple[str, ...]], _GpuLayout] = {}
        self._copy_labels: dict[str, tuple[int, ...]] = {}
        self._sync_types: dict[str, int] = {}
        self._sync = out.layout(
            RecordKind.SYNC,
            "device", "stream", "context", "correlation", "name", "sync_type", "external_id",
        )  # fmt: skip

    def _category_of(self, raw: Any) -> str:
        try:
            return self._categories[raw]
        except KeyError:
            category = self._categories[raw] = str(raw).lower()
            return category
        except TypeError:  # an unhashable cat (a list, an object): not one we know
            return str(raw).lower()

    def feed(self, events: Iterable[Event]) -> None:
        out, host = self.out, self.host
        names, ns, order = out.names, out.ns, out.order.append
        api, ranges = host.api, host.ranges
        add_api, add_range = api.values.extend, ranges.values.extend
        comm_ranges, collective = host.comm_ranges, collectives.NAME_KEY
        api_id, range_id = api.id, ranges.id
        flow_start, flow_finish = host.flow_starts.add, host.flow_finishes.add
        add_host, metadata = host.add, self.metadata.append
        categories, category_of = self._categories, self._category_of
        add_call, add_op = self.stacks.add_call, self.stacks.add_op
        for e in events:
            raw, ph = e.get("cat", ""), e.get("ph")
            if ph == "M":
                metadata(e)
            if raw == FLOW_CATEGORY:
                if ph == "s":
                    flow_start(e.get("id"))
                elif ph == "f" or ph == "t":
                    flow_finish(e.get("id"))
                else:
                    add_host(FLOW_CATEGORY, e)
                continue
            category = categories.get(raw) if type(raw) is str else None
            if category is None:
                category = category_of(raw)
            api_category = API_CATEGORIES.get(category)
            if api_category is None and category not in HOST_RANGES:
                if category == _SYNC_CATEGORY:
                    self._add_sync(e)
                elif category in _CATEGORIES:
                    self.any_gpu = True
                    if ph == "X":
                        self._add_gpu(_CATEGORIES[category], e)
                elif category == PYTHON_FUNCTION:
                    add_call(e)
                else:
                    add_host(category, e)
                continue
            if ph != "X":
                add_host(category, e)
                continue
            # An API call or a host range: thread, name, external id and its own columns.
            args = e.get("args")
            if type(args) is not dict:
                args = args if isinstance(args, dict) else {}
            tid = e.get("tid")
            if type(tid) is not int or tid < 0:
                tid = non_negative(tid)
            name = e.get("name", "")
            if type(name) is not str:
                name = str(name)
            index = names.get(name)
            if index is None:
                index = names[name] = len(names)
            external = args["External id"] if "External id" in args else args.get("external id")
            if type(external) is not int or external < 0:
                external = non_negative(external)
            ts, dur = e.get("ts"), e.get("dur")
            start = ts * 1000 if type(ts) is int else ns(e, "ts", True)
            duration = (dur * 1000 if dur > 0 else 0) if type(dur) is int else max(0, ns(e, "dur"))
            if api_category is not None:
                correlation, cbid = args.get("correlation"), args.get("cbid")
                if type(correlation) is not int or correlation < 0:
                    correlation = non_negative(correlation)
                if type(cbid) is not int or cbid < 0:
                    cbid = non_negative(cbid)
                add_api((start, duration, tid, correlation, cbid, index, api_category, external))
                order(api_id)
            else:
                kind_index = names.get(category)
                if kind_index is None:
                    kind_index = names[category] = len(names)
                if collective in args:  # record_param_comms: the collective it issued
                    comm = collectives.from_kineto(args)
                    if comm is not None:
                        comm_ranges.values.extend(
                            (start, duration, tid, index, kind_index, external, out.name(comm))
                        )
                        order(comm_ranges.id)
                        continue
                add_range((start, duration, tid, index, kind_index, external))
                order(range_id)
                if "Sequence number" in args:  # autograd: a backward op finds its forward
                    add_op(tid, name, start, duration, args)

    def finish(self, meta: dict[str, Any]) -> None:
        """After the last event: flows checked, devices described and the rank read
        from ``meta``, Python stacks joined to the launches they made."""
        self.host.check_flows()
        gpu = self.out.column_values(_LAUNCHED, "correlation")
        self.out.stacks = self.stacks.finish(self.host.api, gpu)
        info = meta.get("distributedInfo")
        if isinstance(info, dict):
            rank = non_negative(info.get("rank"), -1)
            self.out.rank = rank if rank >= 0 else None
            self.out.world_size = non_negative(info.get("world_size"))
        properties = meta.get("deviceProperties")
        for prop in properties if isinstance(properties, list) else []:
            if isinstance(prop, dict):
                info = self.out.devices.get(non_negative(prop.get("id"), -1))
                if info is not None:  # else listed but idle in this trace
                    _describe(info, prop)

    def _add_gpu(self, kind: RecordKind, e: Event) -> None:
        out = self.out
        args = event_args(e)
        key = (kind, tuple(args))
        layout = self._gpu.get(key)
        if layout is None:
            layout = self._gpu[key] = _GpuLayout(out, kind, args)
        values = [0] * layout.width
        for arg, name, shape, at in layout.fields:
            value = args[name]
            if shape == _INT:
                if type(value) is int:
                    values[at[0]] = value if value > 0 else 0
                    continue
            elif shape == _DIM3 and type(value) is list and len(value) == 3:
                x, y, z = value
                if type(x) is int and type(y) is int and type(z) is int:
                    values[at[0]], values[at[1]], values[at[2]] = (
                        x if x > 0 else 0,
                        y if y > 0 else 0,
                        z if z > 0 else 0,
                    )
                    continue
            parsed = parse_value(arg, value)
            if parsed:
                if len(parsed) != len(at):
                    raise ValueError(f"{arg}: {len(parsed)} values for {len(at)} columns")
                for i, v in zip(at, parsed):
                    values[i] = v if v > 0 else 0
        device = non_negative(args.get("device"), non_negative(e.get("pid")))
        values[layout.device] = device
        values[layout.stream] = non_negative(args.get("stream"), non_negative(e.get("tid")))
        name = event_name(e)
        values[layout.name] = out.name(name)
        values[layout.external_id] = external_id(args)
        if layout.collective >= 0:
            comm = collectives.from_kineto(args)
            values[layout.collective] = out.name(comm) if comm is not None else 0
        if kind != RecordKind.KERNEL:
            values[layout.bytes] = _bytes(args, out.ns(e, "dur"))
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
                for i, v in zip(layout.labels, labels):
                    values[i] = v
        elif kind == RecordKind.MEMSET and (m := _MEMSET.search(name)):
            values[layout.labels[0]] = MEMORY_KINDS.parse(m.group(1))
        layout.records.values.extend((*out.times(e), *values))
        out.order.append(layout.records.id)
        out.add_device(device)

    def _sync_type(self, label: str) -> int:
        value = self._sync_types.get(label)
        if value is None:
            value = self._sync_types[label] = SYNC_TYPES.parse(label)
        return value

    def _add_sync(self, e: Event) -> None:
        """A ``cuda_sync`` event (Kineto's CUPTI SYNCHRONIZATION record) as a SYNC record.

        Only with a device in args: older Kineto wrote syncs without one. ``stream`` -1 (an
        event or context synchronisation) becomes CUPTI's invalid value, ``SYNC_NO_STREAM``.
        """
        args = event_args(e)
        if e.get("ph") != "X" or non_negative(args.get("device"), -1) < 0:
            return
        out = self.out
        raw_stream = args.get("stream")
        stream = (
            SYNC_NO_STREAM if raw_stream in (None, -1) else non_negative(raw_stream, SYNC_NO_STREAM)
        )
        label = str(args.get("cuda_sync_kind") or e.get("name") or "")
        device = non_negative(args.get("device"))
        values = (
            device,
            stream,
            non_negative(args.get("context")),
            non_negative(args.get("correlation")),
            out.name(str(e.get("name", ""))),
            self._sync_type(label),
            external_id(args),
        )
        self._sync.values.extend((*out.times(e), *values))
        out.order.append(self._sync.id)
        out.add_device(device)


_OTHER, _INT, _DIM3 = range(3)  # how an arg's value is read: shortcuts for ints and dims


def _shape(arg: SliceArg, plain: bool) -> int:
    if plain:
        return _INT
    return _DIM3 if arg.type is ArgType.DIM3 else _OTHER


class _GpuLayout:
    """Where each column of a GPU record goes, for one kind and one set of arg keys.

    The columns are those the slice-arg table reads from these args (a later arg of the
    table overrides an earlier one, as ``arg_columns`` does), then device, stream, name,
    external id, the collective (kernels with collective args), and bytes and the copy or
    memory kinds; any not set stay 0.
    """

    __slots__ = ("bytes", "collective", "device", "external_id", "fields", "labels", "name",
                 "records", "stream", "width")  # fmt: skip

    def __init__(self, out: TraceBuilder, kind: RecordKind, args: dict[str, Any]) -> None:
        plan = arg_plan(args, args_of(kind))
        columns: list[str] = []
        for arg, _, _ in plan:
            columns.extend(c for c in arg.columns if c not in columns)
        extra = ["device", "stream", "name", "external_id"]
        if kind != RecordKind.KERNEL:
            extra.append("bytes")
        elif collectives.NAME_KEY in args:
            extra.append("collective")
        label_columns = {
            RecordKind.MEMCPY: ("copy_kind", "src_kind", "dst_kind"),
            RecordKind.MEMSET: ("src_kind",),
        }.get(kind, ())
        columns.extend(c for c in (*extra, *label_columns) if c not in columns)
        at = {c: i for i, c in enumerate(columns)}
        self.fields = tuple(
            (arg, name, _shape(arg, plain), tuple(at[c] for c in arg.columns))
            for arg, name, plain in plan
        )
        self.width = len(columns)
        self.device, self.stream, self.name = at["device"], at["stream"], at["name"]
        self.external_id, self.bytes = at["external_id"], at.get("bytes", -1)
        self.collective = at.get("collective", -1)
        self.labels = tuple(at[c] for c in label_columns)
        self.records = out.layout(kind, *columns)


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
