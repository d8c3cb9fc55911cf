"""The real tracer: CUPTI activity records from cupti-python, turned into record frames.

Imported inside the user's process at start-up, so nothing heavy happens at import time:
cupti-python (and with it numpy and cuda.bindings) is imported in ``bind`` / ``start``.

CUPTI hands completed buffers to ``buffer_completed`` as a list of cupti-python record
objects, one class per kind and struct version (cupti-python 13.4 gives
ActivityKernel13, ActivityMemcpy7, ActivityMemset5, ActivityDevice6, ActivityContext4,
ActivitySynchronization2; records are matched by class, never assumed). Reading fields
through Python attributes costs 3-5 us per record, so the callback copies the raw C
structs instead (each object's ``.ptr`` is the address of its own copy of the struct)
and decodes whole groups at once with cupti-python's numpy dtypes: well under a
microsecond per record. Records of a class without a usable dtype (a future struct
version) still go through attribute reads, so a cupti-python upgrade costs speed, not
data.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import operator
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tfprof.agent.sources.base import Sink, SourceUnavailable
from tfprof.core.records import COLUMN_INDEX, NUM_COLUMNS, DeviceInfo, RecordKind, RecordTable

if TYPE_CHECKING:
    import numpy as np

NOT_INSTALLED = "cupti-python is not installed in this interpreter (pip install cupti-python)"

# Record families; each cupti-python class maps to one of them.
KERNEL, MEMCPY, PEER_COPY, MEMSET, DEVICE, CONTEXT, SYNC = range(7)

# CamelCase stem of the cupti-python class -> (snake stem of its dtype, family).
_CLASS_STEMS = {
    "Kernel": ("kernel", KERNEL),
    "Memcpy": ("memcpy", MEMCPY),
    "MemcpyPtoP": ("memcpy_pto_p", PEER_COPY),
    "Memset": ("memset", MEMSET),
    "Device": ("device", DEVICE),
    "Context": ("context", CONTEXT),
    "Synchronization": ("synchronization", SYNC),
}
# The first struct version of some classes has no number (ActivitySynchronization).
_CLASS_RE = re.compile(
    r"^Activity(Kernel|MemcpyPtoP|Memcpy|Memset|Device|Context|Synchronization)(\d*)$"
)

# Struct fields each family reads; a dtype lacking one is not used for bulk decoding.
_FIELDS: dict[int, tuple[str, ...]] = {
    KERNEL: (
        "start", "end", "device_id", "context_id", "stream_id", "correlation_id", "name",
        "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
        "registers_per_thread", "static_shared_memory", "dynamic_shared_memory",
    ),
    MEMCPY: (
        "start", "end", "bytes", "copy_kind", "src_kind", "dst_kind",
        "device_id", "context_id", "stream_id", "correlation_id",
    ),
    PEER_COPY: (
        "start", "end", "bytes", "copy_kind", "src_kind", "dst_kind", "context_id",
        "stream_id", "correlation_id", "src_device_id", "dst_device_id",
    ),
    MEMSET: (
        "start", "end", "bytes", "memory_kind", "device_id", "context_id", "stream_id",
        "correlation_id",
    ),
    DEVICE: (
        "id", "uuid", "name", "compute_capability_major", "compute_capability_minor",
        "num_multiprocessors", "global_memory_size",
    ),
    CONTEXT: ("context_id", "device_id"),
    # No device field: the device comes from the context (CONTEXT records).
    SYNC: ("start", "end", "context_id", "stream_id", "correlation_id", "type"),
}  # fmt: skip

_C = COLUMN_INDEX  # short alias for the column rows below
_MAX_NAME_POINTERS = 1 << 16  # bound on the kernel-name pointer cache
# Largest gap between two records copied along with them: well under the smallest page
# size (4 KiB), so always mapped memory, and small enough not to waste copying.
_MAX_GAP = 256


def _kinds_to_enable(cupti: ModuleType) -> list[int]:
    kind = cupti.ActivityKind
    # CONCURRENT_KERNEL, never KERNEL: the latter serialises every kernel on the GPU.
    return [
        int(kind.CONCURRENT_KERNEL),
        int(kind.MEMCPY),
        int(kind.MEMCPY2),
        int(kind.MEMSET),
        int(kind.DEVICE),
        int(kind.CONTEXT),
    ]


def _optional_kinds(cupti: ModuleType) -> list[int]:
    """Kinds enabled when the driver accepts them; refusing one never stops tracing."""
    return [int(cupti.ActivityKind.SYNCHRONIZATION)]


def format_uuid(raw: bytes) -> str:
    """A device UUID as nvidia-smi prints it: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx."""
    h = bytes(raw[:16]).hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


@dataclass(frozen=True)
class _Layout:
    cls: type
    family: int
    dtype: Any  # numpy structured dtype of the C struct
    words: int  # struct size in 8-byte words
    needed: Any  # indices of the 8-byte words holding the fields we read
    compact: Any  # dtype of those words gathered side by side


def _layout(cls: type, family: int, dtype: Any) -> _Layout:
    import numpy

    spans = {}
    for field in _FIELDS[family]:
        fdtype, offset = dtype.fields[field][:2]
        spans[field] = (offset, fdtype, range(offset // 8, (offset + fdtype.itemsize - 1) // 8 + 1))
    needed = sorted({w for _, _, words in spans.values() for w in words})
    slot = {w: i for i, w in enumerate(needed)}
    compact = numpy.dtype(
        {
            "names": list(spans),
            "formats": [fdtype for _, fdtype, _ in spans.values()],
            "offsets": [slot[off // 8] * 8 + off % 8 for off, _, _ in spans.values()],
            "itemsize": 8 * len(needed),
        }
    )
    return _Layout(cls, family, dtype, dtype.itemsize // 8, numpy.array(needed), compact)


def _discover_layouts(cupti: ModuleType) -> list[_Layout]:
    """Every record class of cupti-python we can decode in bulk, found by name."""
    layouts = []
    for attr in dir(cupti):
        match = _CLASS_RE.match(attr)
        if not match:
            continue
        snake, family = _CLASS_STEMS[match.group(1)]
        dtype = getattr(cupti, f"activity_{snake}{match.group(2)}_dtype", None)
        if dtype is None or dtype.names is None or dtype.itemsize % 8:
            continue
        if any(field not in dtype.names for field in _FIELDS[family]):
            continue
        layouts.append(_layout(getattr(cupti, attr), family, dtype))
    return layouts


class RecordConverter:
    """Turns the record objects of one completed CUPTI buffer into a ``RecordTable``.

    Not thread-safe by itself; ``CuptiSource`` serialises calls (CUPTI may complete
    buffers on its own thread while ``stop`` flushes on another).
    """

    def __init__(self, sink: Sink, cupti: ModuleType) -> None:
        import numpy

        self._np = numpy
        self._sink = sink
        self._layouts = _discover_layouts(cupti)
        self._code_of: dict[type, int] = {lay.cls: i for i, lay in enumerate(self._layouts)}
        self._sizes = numpy.array([lay.words * 8 for lay in self._layouts], dtype=numpy.int64)
        ak = cupti.ActivityKind
        self._family_of_kind = {
            int(ak.CONCURRENT_KERNEL): KERNEL,
            int(ak.KERNEL): KERNEL,
            int(ak.MEMCPY): MEMCPY,
            int(ak.MEMCPY2): PEER_COPY,
            int(ak.MEMSET): MEMSET,
            int(ak.DEVICE): DEVICE,
            int(ak.CONTEXT): CONTEXT,
            int(ak.SYNCHRONIZATION): SYNC,
        }
        self._ptr = operator.attrgetter("ptr")
        self._names: dict[bytes, int] = {b"": 0}
        self._name_by_ptr: dict[int, int] = {0: 0}
        self._devices: set[tuple[int, str]] = set()
        self.context_device: dict[int, int] = {}  # CUPTI context id -> device ordinal

    # -- bulk path ----------------------------------------------------------------------

    def convert(self, activities: Sequence[Any]) -> RecordTable | None:
        """Kernel, memcpy and memset records as one table (None when there are none).

        Device and context records are handled on the way (``sink.add_devices``).
        """
        np = self._np
        n = len(activities)
        if n == 0:
            return None
        get = self._code_of.get
        codes = np.fromiter(map(get, map(type, activities), itertools.repeat(-1, n)), np.int64, n)
        known = codes >= 0
        leftovers: list[Any] = []
        if not known.all():
            leftovers = [a for a, ok in zip(activities, known.tolist(), strict=True) if not ok]
            activities = [a for a, ok in zip(activities, known.tolist(), strict=True) if ok]
            codes = codes[known]
            n = len(activities)
        parts: list[Any] = []
        if n:
            parts.append(self._convert_known(activities, codes))
        if leftovers:
            parts.append(self._convert_by_attributes(leftovers))
        rows = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        if rows.shape[1] == 0:
            return None
        return RecordTable(list(rows))

    def _convert_known(self, activities: Sequence[Any], codes: np.ndarray) -> np.ndarray:
        np = self._np
        n = len(activities)
        ptrs = np.fromiter(map(self._ptr, activities), np.int64, n)
        sizes = self._sizes[codes]
        raw, offsets = self._copy_structs(ptrs, sizes)
        words = np.frombuffer(raw, dtype=np.uint64)
        word_offsets = offsets // 8
        out_parts = []
        present = np.flatnonzero(np.bincount(codes)).tolist()
        for code in present:
            layout = self._layouts[code]
            rows = word_offsets if len(present) == 1 else word_offsets[codes == code]
            recs = self._structs(raw, words, rows, layout)
            family = layout.family
            if family == DEVICE:
                self._add_devices(recs)
            elif family == CONTEXT:
                for ctx, dev in zip(
                    recs["context_id"].tolist(), recs["device_id"].tolist(), strict=True
                ):
                    self.context_device[ctx] = dev
            else:
                out_parts.append(self._fill(family, recs))
        if not out_parts:
            return np.zeros((NUM_COLUMNS, 0), dtype=np.int64)
        return out_parts[0] if len(out_parts) == 1 else np.concatenate(out_parts, axis=1)

    def _copy_structs(self, ptrs: np.ndarray, sizes: np.ndarray) -> tuple[bytes, np.ndarray]:
        """Copy every record's C struct into one bytes object, with each one's offset.

        cupti-python copies each record out of CUPTI's buffer into its own heap block,
        so consecutive records usually sit one malloc chunk apart (248-byte kernel
        structs 256 bytes apart). A run of records with small gaps is copied with one
        ``string_at``: a gap shorter than a page lies on pages that also hold a record,
        so it is mapped memory; it is never interpreted.
        """
        np = self._np
        n = len(ptrs)
        ends = ptrs + sizes
        gaps = ptrs[1:] - ends[:-1]
        if (ptrs & 7).any():  # unaligned structs: copy one by one (never seen)
            raw = b"".join(map(ctypes.string_at, ptrs.tolist(), sizes.tolist()))
            return raw, np.cumsum(sizes) - sizes
        breaks = np.flatnonzero((gaps < 0) | (gaps > _MAX_GAP)) + 1
        if len(breaks) == 0:
            first = int(ptrs[0])
            return ctypes.string_at(first, int(ends[-1]) - first), ptrs - first
        run_first = np.concatenate(([0], breaks))
        run_last = np.concatenate((breaks, [n])) - 1
        starts, lengths = ptrs[run_first], ends[run_last] - ptrs[run_first]
        raw = b"".join(map(ctypes.string_at, starts.tolist(), lengths.tolist()))
        # where each run begins in ``raw``, repeated for each of its records
        run_base = np.cumsum(lengths) - lengths - starts
        offsets = ptrs + np.repeat(run_base, run_last - run_first + 1)
        return raw, offsets

    def _structs(self, raw: bytes, words: np.ndarray, rows: np.ndarray, layout: _Layout) -> Any:
        """The records at ``rows`` (word offsets into ``raw``) as a structured array."""
        np = self._np
        m = len(rows)
        if m == 1:
            return np.ndarray((1,), layout.dtype, buffer=raw, offset=int(rows[0]) * 8)
        steps = rows[1:] - rows[:-1]
        step = int(steps[0])
        if step >= layout.words and bool((steps == step).all()):  # evenly spaced: a view
            return np.ndarray(
                (m,), layout.dtype, buffer=raw, offset=int(rows[0]) * 8, strides=(step * 8,)
            )
        # scattered: gather only the 8-byte words holding fields we read
        gathered = words[rows[:, None] + layout.needed]
        return gathered.view(layout.compact).reshape(m)

    def _fill(self, family: int, recs: Any) -> np.ndarray:
        np = self._np
        m = len(recs)
        out = np.zeros((NUM_COLUMNS, m), dtype=np.int64)
        start = recs["start"].astype(np.int64)
        out[_C["start_ns"]] = start
        # Records CUPTI could not time carry 0 timestamps: never a negative duration.
        np.maximum(recs["end"].astype(np.int64) - start, 0, out=out[_C["duration_ns"]])
        out[_C["context"]] = recs["context_id"]
        out[_C["stream"]] = recs["stream_id"]
        out[_C["correlation"]] = recs["correlation_id"]
        if family == KERNEL:
            out[_C["kind"]] = RecordKind.KERNEL
            out[_C["device"]] = recs["device_id"]
            out[_C["name"]] = self._name_ids(recs["name"])
            for column, field in (
                ("grid_x", "grid_x"),
                ("grid_y", "grid_y"),
                ("grid_z", "grid_z"),
                ("block_x", "block_x"),
                ("block_y", "block_y"),
                ("block_z", "block_z"),
                ("registers", "registers_per_thread"),
                ("static_smem", "static_shared_memory"),
                ("dynamic_smem", "dynamic_shared_memory"),
            ):
                out[_C[column]] = recs[field]
        elif family == MEMSET:
            out[_C["kind"]] = RecordKind.MEMSET
            out[_C["device"]] = recs["device_id"]
            out[_C["bytes"]] = recs["bytes"]
            out[_C["src_kind"]] = recs["memory_kind"]
        elif family == SYNC:
            out[_C["kind"]] = RecordKind.SYNC
            out[_C["device"]] = self._devices_of_contexts(recs["context_id"])
            # stream_id is CUPTI_SYNCHRONIZATION_INVALID_VALUE (SYNC_NO_STREAM) for
            # context-wide synchronisation; kept as is.
            out[_C["sync_type"]] = recs["type"]
        else:  # MEMCPY, PEER_COPY
            out[_C["kind"]] = RecordKind.MEMCPY
            out[_C["bytes"]] = recs["bytes"]
            out[_C["copy_kind"]] = recs["copy_kind"]
            out[_C["src_kind"]] = recs["src_kind"]
            out[_C["dst_kind"]] = recs["dst_kind"]
            if family == PEER_COPY:
                out[_C["device"]] = recs["src_device_id"]
                out[_C["dst_device"]] = recs["dst_device_id"]
            else:
                out[_C["device"]] = recs["device_id"]
        return out

    def _devices_of_contexts(self, contexts: np.ndarray) -> np.ndarray:
        # CONTEXT records precede the SYNC records of their context (CUPTI emits one when
        # the context is created); an unseen context falls back to device 0.
        lookup = self.context_device.get
        return self._np.array([lookup(c, 0) for c in contexts.tolist()], dtype=self._np.int64)

    def _name_ids(self, pointers: np.ndarray) -> np.ndarray:
        # CUPTI points all records of one kernel at one shared name string, and the
        # strings stay put while CUPTI runs: look each distinct pointer up once, cached
        # by pointer (reading a C string costs about a microsecond), then by content.
        # (A sort rather than np.unique, which imports numpy.ma on first use.)
        np = self._np
        order = np.argsort(pointers)
        ordered = pointers[order]
        first = np.empty(len(ordered), dtype=bool)
        first[0] = True
        np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
        distinct = ordered[first].tolist()
        ids = np.array(list(map(self._name_id, distinct)), dtype=np.int64)
        out = np.empty(len(ordered), dtype=np.int64)
        out[order] = ids[np.cumsum(first) - 1]
        return out

    def _name_id(self, ptr: int) -> int:
        by_ptr = self._name_by_ptr
        found = by_ptr.get(ptr)
        if found is None:
            raw = ctypes.string_at(ptr) if ptr else b""
            found = self._names.get(raw)
            if found is None:
                found = self._names[raw] = self._sink.intern(raw.decode("utf-8", "replace"))
            if len(by_ptr) >= _MAX_NAME_POINTERS:
                by_ptr.clear()
            by_ptr[ptr] = found
        return found

    def _add_devices(self, recs: Any) -> None:
        infos = []
        for rec in recs:
            uuid = format_uuid(rec["uuid"].tobytes())
            ordinal = int(rec["id"])
            if (ordinal, uuid) in self._devices:
                continue
            self._devices.add((ordinal, uuid))
            name_ptr = int(rec["name"])
            infos.append(
                DeviceInfo(
                    ordinal=ordinal,
                    uuid=uuid,
                    name=ctypes.string_at(name_ptr).decode("utf-8", "replace") if name_ptr else "",
                    compute_capability_major=int(rec["compute_capability_major"]),
                    compute_capability_minor=int(rec["compute_capability_minor"]),
                    sm_count=int(rec["num_multiprocessors"]),
                    memory_bytes=int(rec["global_memory_size"]),
                )
            )
        if infos:
            self._sink.add_devices(infos)

    # -- attribute path (classes without a usable dtype; also the benchmark baseline) ---

    def convert_by_attributes(self, activities: Sequence[Any]) -> RecordTable | None:
        rows = self._convert_by_attributes(activities)
        return RecordTable(list(rows)) if rows.shape[1] else None

    def _convert_by_attributes(self, activities: Sequence[Any]) -> np.ndarray:
        np = self._np
        table = RecordTable()
        family_of_kind = self._family_of_kind
        names = self._names
        for rec in activities:
            family = family_of_kind.get(rec.kind)
            if family == KERNEL:
                raw = rec.name.encode()
                name = names.get(raw)
                if name is None:
                    name = names[raw] = self._sink.intern(rec.name)
                table.add_kernel(
                    start_ns=rec.start,
                    end_ns=max(rec.end, rec.start),
                    device=rec.device_id,
                    context=rec.context_id,
                    stream=rec.stream_id,
                    correlation=rec.correlation_id,
                    name=name,
                    grid=(rec.grid_x, rec.grid_y, rec.grid_z),
                    block=(rec.block_x, rec.block_y, rec.block_z),
                    registers=rec.registers_per_thread,
                    static_smem=rec.static_shared_memory,
                    dynamic_smem=rec.dynamic_shared_memory,
                )
            elif family in (MEMCPY, PEER_COPY):
                peer = family == PEER_COPY
                table.add_memcpy(
                    start_ns=rec.start,
                    end_ns=max(rec.end, rec.start),
                    device=rec.src_device_id if peer else rec.device_id,
                    dst_device=rec.dst_device_id if peer else 0,
                    context=rec.context_id,
                    stream=rec.stream_id,
                    correlation=rec.correlation_id,
                    nbytes=rec.bytes,
                    copy_kind=rec.copy_kind,
                    src_kind=rec.src_kind,
                    dst_kind=rec.dst_kind,
                )
            elif family == MEMSET:
                table.add_memset(
                    start_ns=rec.start,
                    end_ns=max(rec.end, rec.start),
                    device=rec.device_id,
                    context=rec.context_id,
                    stream=rec.stream_id,
                    correlation=rec.correlation_id,
                    nbytes=rec.bytes,
                    memory_kind=rec.memory_kind,
                )
            elif family == SYNC:
                table.add_sync(
                    start_ns=rec.start,
                    end_ns=max(rec.end, rec.start),
                    device=self.context_device.get(rec.context_id, 0),
                    context=rec.context_id,
                    stream=rec.stream_id,
                    correlation=rec.correlation_id,
                    sync_type=int(rec.type),
                )
            elif family == CONTEXT:
                self.context_device[rec.context_id] = rec.device_id
            # DEVICE records of an unknown struct version and other kinds: ignored.
        n = len(table)
        rows = np.zeros((NUM_COLUMNS, n), dtype=np.int64)
        if n:
            for i, col in enumerate(table.columns):
                rows[i] = np.frombuffer(col, dtype=np.int64, count=n)
        return rows


class CuptiSource:
    """CUPTI activity tracing through cupti-python.

    ``start`` registers the buffer callbacks and enables CONCURRENT_KERNEL, MEMCPY,
    MEMCPY2, MEMSET, DEVICE and CONTEXT, and SYNCHRONIZATION where the driver accepts
    it; CUPTI then fills ``buffer_bytes`` buffers and
    hands each completed one to ``buffer_completed``. ``flush_period_ms`` > 0 asks CUPTI
    to complete partial buffers that often, so records stream while the job runs rather
    than when a buffer fills up or at the end.
    """

    name = "cupti"

    def __init__(self, buffer_bytes: int = 8 << 20, flush_period_ms: int = 0) -> None:
        self.buffer_bytes = buffer_bytes
        self.flush_period_ms = flush_period_ms
        self.dropped = 0  # records lost in our own callback (also reported to the sink)
        self._cupti: ModuleType | None = None
        self._sink: Sink | None = None
        self._converter: RecordConverter | None = None
        self._enabled: list[int] = []
        self._warned = False
        self._lock = threading.Lock()

    @property
    def enabled_kinds(self) -> tuple[int, ...]:
        return tuple(self._enabled)

    @property
    def converter(self) -> RecordConverter | None:
        """The buffer decoder (after ``bind``); the benchmark times it on its own."""
        return self._converter

    def bind(self, sink: Sink) -> None:
        """Import cupti-python and prepare the callbacks, without touching CUPTI itself."""
        try:
            from cupti import cupti
        except ImportError as exc:
            raise SourceUnavailable(NOT_INSTALLED) from exc
        self._cupti = cupti
        self._sink = sink
        self._converter = RecordConverter(sink, cupti)

    def start(self, sink: Sink) -> None:
        self.bind(sink)
        cupti = self._cupti
        assert cupti is not None
        try:
            cupti.activity_register_callbacks(self.buffer_requested, self.buffer_completed)
            for kind in _kinds_to_enable(cupti):
                cupti.activity_enable(kind)
                self._enabled.append(kind)
        except Exception as exc:
            self._disable_all()
            from tfprof.agent.sources.cupti_errors import describe_cupti_failure

            raise SourceUnavailable(describe_cupti_failure(exc)) from exc
        for kind in _optional_kinds(cupti):
            try:
                cupti.activity_enable(kind)
            except Exception:
                continue  # e.g. an old driver: host waits go unrecorded, nothing else
            self._enabled.append(kind)
        if self.flush_period_ms > 0:
            # an optimisation only: records still come when a buffer fills up
            with contextlib.suppress(Exception):
                cupti.activity_flush_period(self.flush_period_ms)

    # -- CUPTI callbacks: run on CUPTI's thread or inside activity_flush_all ------------

    def buffer_requested(self) -> tuple[int, int]:
        return self.buffer_bytes, 0  # 0: as many records as fit

    def buffer_completed(self, activities: Sequence[Any]) -> None:
        converter, sink = self._converter, self._sink
        if converter is None or sink is None:
            return
        try:
            with self._lock:
                table = converter.convert(activities)
            if table is not None:
                sink.submit(table)  # never wait: this may be the training thread
        except Exception as exc:
            self._drop(len(activities), exc)

    def _drop(self, count: int, exc: BaseException) -> None:
        try:
            self.dropped += count
            assert self._sink is not None
            self._sink.add_tracer_dropped(count)
            if not self._warned:
                self._warned = True
                self._sink.warn(
                    f"dropped CUPTI records: converting a buffer failed "
                    f"({type(exc).__name__}: {exc}); later failures are counted silently"
                )
        except Exception:
            pass

    # -- the rest of the Source protocol ------------------------------------------------

    def tracer_clock_ns(self) -> int | None:
        try:
            module: Any = self._cupti
            if module is None:
                from cupti import cupti as module
            return int(module.get_timestamp())
        except Exception:
            return None

    def stop(self, deadline: float) -> None:
        """Force out every buffer, report CUPTI's own losses, disable the kinds.

        ``activity_flush_all`` completes buffers synchronously through
        ``buffer_completed``, which never blocks on the sink, so this returns quickly;
        CUPTI offers no way to bound the flush itself by ``deadline``.
        """
        cupti = self._cupti
        if cupti is None or not self._enabled:
            return
        try:
            flag = int(getattr(cupti.ActivityFlag, "FLUSH_FORCED", 1))
            cupti.activity_flush_all(flag)
        except Exception:
            pass
        self._report_cupti_dropped(cupti)
        self._disable_all()

    def _report_cupti_dropped(self, cupti: ModuleType) -> None:
        try:
            dropped = ctypes.c_size_t(0)
            # context NULL, stream 0: the global queue, where all activity buffers go.
            cupti.activity_get_num_dropped_records(0, 0, ctypes.addressof(dropped))
            if dropped.value and self._sink is not None:
                self._sink.add_tracer_dropped(int(dropped.value))
        except Exception:
            pass

    def _disable_all(self) -> None:
        cupti = self._cupti
        while self._enabled:
            kind = self._enabled.pop()
            try:
                if cupti is not None:
                    cupti.activity_disable(kind)
            except Exception:
                pass
