"""What every trace reader shares: the imported trace, the record builder, field parsing.

Times: ``ts``/``dur`` are (possibly fractional) µs. JSON floats are parsed as
``Decimal`` so ns survive exactly at epoch magnitudes (a float64 of 1.7e15 µs only
resolves 0.25 µs), then rounded half-even to integer ns. Starts are made relative to
the earliest record (which starts at 0; a host range may open before the first GPU
event) and records are sorted by start.
"""

from __future__ import annotations

import array
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from tfprof.core.code_stacks import StackBatch
from tfprof.core.errors import TraceFormatError
from tfprof.core.records import COLUMN_INDEX, COLUMNS, DeviceInfo, RecordKind, RecordTable
from tfprof.core.slice_args import CATEGORIES, ArgType, SliceArg, category_of, parse_value
from tfprof.readers.columns import sort_columns

FORMAT_TF_TIMELINE = "tf-timeline"
FORMAT_KINETO = "kineto"
FORMAT_TFPROF = "tfprof"

# One Chrome trace event as parsed from JSON (or built by a binary format's reader).
Event = dict[str, Any]

_THOUSAND = Decimal(1000)


class NotStreamable(Exception):
    """A reader of events in chunks met what only a reader of the whole file can read
    right (a process named after its events, say): read the file again, whole."""


class RecordedTrace:
    """Records of one trace file, columnar, sorted by start, first start at 0.

    A file that says whose records it holds (tfprof's own exports name the job and task
    of every track) keeps that identity: ``tasks`` lists its (job, task) pairs and
    ``task_index`` gives each record's, ``gpu_of`` the GPU ordinal each device ordinal
    had in its task (a file of several tasks gives each (job, task, GPU) an ordinal of
    its own, so that one process can replay it), and ``host_samples`` each task's host
    readings (``"time_ns"`` on the records' clock, start 0 being the first record's,
    then one list per host series). Other files name none of this: ``tasks`` is empty.

    A file of one rank of a distributed job (Kineto's ``distributedInfo``) says which:
    ``rank`` (None when the file does not say) of ``world_size`` ranks (0: not said).
    """

    # A plain class, not a dataclass: importing dataclasses costs the job's start-up
    # (bench/results/cpu-design-choices.txt).
    __slots__ = (
        "columns",
        "devices",
        "flow_stats",
        "format",
        "gpu_of",
        "host_samples",
        "names",
        "origin_ns",
        "path",
        "rank",
        "stacks",
        "task_index",
        "tasks",
        "world_size",
    )

    def __init__(
        self,
        path: str,
        format: str,
        names: list[str],
        devices: list[DeviceInfo],
        columns: dict[str, array.array[int]],
        origin_ns: int = 0,
        flow_stats: dict[str, int] | None = None,
    ) -> None:
        self.path = path
        self.format = format  # FORMAT_TF_TIMELINE, FORMAT_KINETO or FORMAT_TFPROF
        self.names = names  # the trace's own string table; names[0] == "" (no name)
        self.devices = devices  # one per device ordinal that has records (no uuid)
        self.columns = columns  # every name in COLUMNS, int64, one value per record
        # The file's flow events checked against the correlation links (Kineto ac2g,
        # TF dataflow): counts by what was found; empty when the file has none.
        self.flow_stats = flow_stats or {}
        # The file's own time of start 0, in ns: the earliest record as written
        # (epoch ns for TF and tfprof files and for Kineto files that write
        # baseTimeNanoseconds, else whatever clock Kineto used), so that imports can
        # keep each file's clock.
        self.origin_ns = origin_ns
        self.tasks: list[tuple[str, str]] = []
        self.task_index: array.array[int] | None = None
        self.gpu_of: dict[int, int] = {}
        self.host_samples: dict[int, dict[str, list[float]]] = {}
        self.rank: int | None = None
        self.world_size = 0
        # Python stacks the file recorded (Kineto's python_function events): frames and
        # nodes naming ``names``, launch captures timed like the records (start 0 first).
        self.stacks: StackBatch | None = None

    def __repr__(self) -> str:
        return f"RecordedTrace({self.path!r}, {self.format!r}, {len(self)} records)"

    def __len__(self) -> int:
        return len(self.columns["kind"])

    def column(self, name: str) -> array.array[int]:
        return self.columns[name]

    @property
    def span_ns(self) -> int:
        """From the first start (0) to the latest end."""
        starts, durs = self.columns["start_ns"], self.columns["duration_ns"]
        return max((s + d for s, d in zip(starts, durs)), default=0)

    def per_stream_counts(self) -> dict[tuple[int, int], dict[str, int]]:
        """GPU activity (kernels, copies, memsets, syncs) per (device, stream)."""
        counts: dict[tuple[int, int], dict[str, int]] = {}
        cols = self.columns
        for kind, device, stream in zip(cols["kind"], cols["device"], cols["stream"]):
            if kind not in CATEGORIES:
                continue  # host records: API calls, ranges, memory
            per = counts.setdefault((device, stream), {"kernel": 0, "memcpy": 0, "memset": 0})
            label = category_of(kind)
            per[label] = per.get(label, 0) + 1  # "sync" only where there are syncs
        return counts

    def table(self, start: int = 0, stop: int | None = None) -> RecordTable:
        """Records [start:stop] as a RecordTable (names still index ``self.names``)."""
        return RecordTable([self.columns[name][start:stop] for name in COLUMNS])


class Layout:
    """Records of one kind that set the same columns, kept narrow until ``finish``.

    Readers ``values.extend((start_ns, duration_ns, *columns))`` (one flat int64 array,
    record after record) and append this layout's ``id`` to the builder's ``order``: a
    30-wide row of Python ints per record cost most of a big import's time and memory.
    """

    __slots__ = ("columns", "id", "kind", "values")

    def __init__(self, layout_id: int, kind: int, columns: tuple[str, ...]) -> None:
        self.id = layout_id
        self.kind = kind
        self.columns = ("start_ns", "duration_ns", *columns)
        self.values = array.array("q")

    def __len__(self) -> int:
        return len(self.values) // len(self.columns)

    def column(self, name: str) -> array.array[int]:
        """One column's values, in insertion order."""
        return self.values[self.columns.index(name) :: len(self.columns)]

    def extend_columns(self, columns: list[array.array[int]]) -> int:
        """Append records given column by column (``columns`` order, all one length);
        returns how many. The caller appends them to the builder's ``order``."""
        width, count = len(self.columns), len(columns[0])
        block = array.array("q", bytes(8 * width * count))
        for i, column in enumerate(columns):
            block[i::width] = column
        self.values.extend(block)
        return count


class TraceBuilder:
    """Collects records by layout, then sorts and columnises them in ``finish``.

    ``add`` takes any record by column name; the big readers extend a ``layout``'s
    values directly. Records keep their insertion order (``order``: one layout id per
    record), so a stable sort by start gives every reader the same result as one list.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.names: dict[str, int] = {"": 0}
        self.devices: dict[int, DeviceInfo] = {}
        self.flow_stats: dict[str, int] = {}
        self.order = array.array("B")  # layout id of each record, in insertion order
        # Whose records (readers of files that say so): each record's index into
        # ``tasks``, the GPU ordinal each device ordinal had in its task, host samples
        # per task and series as (ns, value) in the file's own time.
        self.tasks: dict[tuple[str, str], int] = {}
        self.task_of = array.array("q")
        self.gpu_of: dict[int, int] = {}
        self.samples: dict[int, dict[str, list[tuple[int, float]]]] = {}
        # The rank the file says it holds (Kineto's distributedInfo), and of how many.
        self.rank: int | None = None
        self.world_size = 0
        self.stacks: StackBatch | None = None  # times in the file's ns, as ``ns`` gives
        self._layouts: list[Layout] = []
        self._by_columns: dict[tuple[int, tuple[str, ...]], Layout] = {}

    def __len__(self) -> int:
        return len(self.order)

    def name(self, name: str) -> int:
        return self.names.setdefault(name, len(self.names))

    def layout(self, kind: int, *columns: str) -> Layout:
        """The layout of ``kind`` records setting ``columns`` (besides start and duration)."""
        key = (int(kind), columns)
        found = self._by_columns.get(key)
        if found is None:
            unknown = [c for c in columns if c not in COLUMN_INDEX or c in _TIME_COLUMNS]
            if unknown:
                raise KeyError(f"not a record column a reader sets: {unknown}")
            if len(self._layouts) > 255:
                raise ValueError("too many record layouts")  # ids are one byte
            found = Layout(len(self._layouts), int(kind), columns)
            self._layouts.append(found)
            self._by_columns[key] = found
        return found

    def add_device(self, ordinal: int) -> None:
        """Make GPU ``ordinal`` one of the trace's devices (records on it do)."""
        if ordinal not in self.devices:
            self.devices[ordinal] = {"ordinal": ordinal}

    def add(self, kind: RecordKind, event: Event, task: int | None = None, **values: int) -> None:
        """One record of ``event``'s time; ``values``: columns by name; ``task``: whose
        record it is (``task``'s index), given for every record or for none.

        A record that names a ``device`` makes that GPU one of the trace's devices; host
        records (API calls, host ranges) name none.
        """
        start = self.ns(event, "ts", required=True)
        duration = max(0, self.ns(event, "dur"))
        layout = self.layout(kind, *values)
        layout.values.extend((start, duration, *values.values()))
        self.order.append(layout.id)
        if task is not None:
            self.task_of.append(task)
        if "device" in values:
            self.add_device(values["device"])

    def task(self, job: str, task: str) -> int:
        """The index of the (job, task) records and samples are said to belong to."""
        return self.tasks.setdefault((job, task), len(self.tasks))

    def host_sample(self, task: int, series: str, time_ns: int, value: float) -> None:
        """One host reading of ``task`` (time in the file's ns, as ``ns`` gives)."""
        self.samples.setdefault(task, {}).setdefault(series, []).append((time_ns, value))

    def times(self, event: Event) -> tuple[int, int]:
        """(start, duration) in ns of ``event``, as ``add`` takes them; ints take a shortcut."""
        ts, dur = event.get("ts"), event.get("dur")
        start = ts * 1000 if type(ts) is int else self.ns(event, "ts", required=True)
        if type(dur) is int:
            return start, dur * 1000 if dur > 0 else 0
        return start, max(0, self.ns(event, "dur"))

    def ns(self, event: Event, key: str, required: bool = False) -> int:
        value = event.get(key)
        if value is None and not required:
            return 0
        try:
            return us_to_ns(value)
        except (TypeError, ValueError, InvalidOperation, OverflowError):
            raise TraceFormatError(
                f"{self.path}: event {event.get('name')!r} has a non-numeric {key}: {value!r}"
            ) from None

    def column_values(self, kinds: Iterable[int], column: str) -> set[int]:
        """The distinct values of ``column`` among the records of ``kinds`` so far."""
        wanted = {int(k) for k in kinds}
        values: set[int] = set()
        for layout in self._layouts:
            if layout.kind in wanted and len(layout):
                if column in layout.columns:
                    values.update(layout.column(column))
                else:
                    values.add(0)  # a column a layout does not set is 0
        return values

    def finish(self, fmt: str) -> RecordedTrace:
        if self.task_of and len(self.task_of) != len(self.order):
            raise ValueError("a task given for some records only")
        carried = self.task_of if self.task_of else None
        columns, origin, task_index = sort_columns(self._layouts, self.order, carried)
        names = [""] * len(self.names)
        for text, index in self.names.items():
            names[index] = text
        devices = [self.devices[k] for k in sorted(self.devices)]
        trace = RecordedTrace(
            self.path, fmt, names, devices, columns, origin, dict(self.flow_stats)
        )
        trace.rank, trace.world_size = self.rank, self.world_size
        if self.stacks is not None:
            times = self.stacks.samples["time_ns"]
            self.stacks.samples["time_ns"] = array.array("q", (t - origin for t in times))
            trace.stacks = self.stacks
        if self.tasks:
            trace.tasks = sorted(self.tasks, key=self.tasks.__getitem__)
            trace.task_index = task_index
            trace.gpu_of = dict(self.gpu_of)
            trace.host_samples = {
                task: _aligned(series, origin) for task, series in self.samples.items()
            }
        return trace


def _aligned(series: dict[str, list[tuple[int, float]]], origin: int) -> dict[str, list[float]]:
    """Readings of several series as columns on one time column (``time_ns`` from
    ``origin``): each time any series was read at, a series' value 0 where it was not."""
    times = sorted({t for readings in series.values() for t, _ in readings})
    columns: dict[str, list[float]] = {"time_ns": [t - origin for t in times]}
    for name, readings in series.items():
        at = dict(readings)
        columns[name] = [at.get(t, 0) for t in times]
    return columns


_TIME_COLUMNS = ("kind", "start_ns", "duration_ns")


def us_to_ns(value: Any) -> int:
    """A ``ts``/``dur`` in µs (int, Decimal, float or numeric string) as integer ns."""
    if isinstance(value, bool):
        raise TypeError("bool")
    if isinstance(value, int):
        return value * 1000
    if isinstance(value, Decimal):
        return int((value * 1000).to_integral_value())  # half-even, like round()
    if isinstance(value, float):
        return round(value * 1000)
    if isinstance(value, str):
        return us_to_ns(Decimal(value))
    raise TypeError(type(value).__name__)


def ns_to_us(ns: int) -> Decimal:
    """Integer ns as the µs of a built event: exact, so ``us_to_ns`` gives back the same ns."""
    return Decimal(ns) / _THOUSAND


def non_negative(value: Any, default: int = 0) -> int:
    """A non-negative integer field from args, tolerating Decimal / str / junk."""
    if type(value) is int:
        return value if value >= 0 else default
    if isinstance(value, bool) or value is None:
        return default
    try:
        number = int(value) if isinstance(value, int) else int(Decimal(str(value)))
    except (ValueError, InvalidOperation, OverflowError):
        return default
    return number if number >= 0 else default


def metadata_event(kind: str, pid: int, name: str, tid: int | None = None) -> Event:
    """A ``process_name`` / ``thread_name`` metadata event, as binary readers build them."""
    event: Event = {"ph": "M", "name": kind, "pid": pid, "args": {"name": name}}
    if tid is not None:
        event["tid"] = tid
    return event


def event_args(event: Event) -> dict[str, Any]:
    args = event.get("args")
    return args if isinstance(args, dict) else {}


def arg_columns(args: Mapping[str, Any], wanted: Iterable[SliceArg]) -> dict[str, int]:
    """Record columns from the slice args ``wanted`` (by their shared names and aliases).

    Args that are absent or unreadable are left out (their columns stay 0); negative
    values, which no count or id of ours can take, read as 0.
    """
    wanted = wanted if isinstance(wanted, tuple) else tuple(wanted)
    values: dict[str, int] = {}
    for arg, key, plain in arg_plan(args, wanted):
        value = args[key]
        if plain and type(value) is int:  # most args: one int column, written as an int
            values[arg.columns[0]] = value if value > 0 else 0
            continue
        parsed = parse_value(arg, value)
        if parsed:
            if len(parsed) != len(arg.columns):
                raise ValueError(f"{arg}: {len(parsed)} values for {len(arg.columns)} columns")
            values.update(zip(arg.columns, (max(0, v) for v in parsed)))
    return values


# (id of a ``wanted`` tuple, the keys of an args dict) -> (arg, the key it is found by, is
# it a plain int): which args are present depends on the keys only, and a million events
# of a trace have a handful of key sets.
_Plan = tuple[tuple[SliceArg, str, bool], ...]
_PLANS: dict[tuple[int, tuple[str, ...]], _Plan] = {}
_PLANNED: dict[int, tuple[SliceArg, ...]] = {}  # keeps each planned tuple (and its id) alive
_MAX_PLANS = 4096


def arg_plan(args: Mapping[str, Any], wanted: tuple[SliceArg, ...]) -> _Plan:
    """(arg, the key it is found by, whether it is one plain int column) for each of
    ``wanted`` present in ``args``, in ``wanted`` order; cached by ``args``' keys."""
    key = (id(wanted), tuple(args))
    plan = _PLANS.get(key)
    if plan is not None and _PLANNED.get(id(wanted)) is wanted:
        return plan
    found = []
    for arg in wanted:
        for name in (arg.name, *arg.aliases):  # as ``find`` looks an arg up
            if name in args:
                found.append((arg, name, arg.type is ArgType.INT and len(arg.columns) == 1))
                break
    plan = tuple(found)
    if len(_PLANS) < _MAX_PLANS and len(_PLANNED) < 64:
        _PLANNED[id(wanted)] = wanted
        _PLANS[key] = plan
    return plan
