"""The record builder every reader fills: records by layout, then sorted and columnised
into a ``RecordedTrace``."""

from __future__ import annotations

import array
from collections.abc import Iterable
from decimal import InvalidOperation

from tfprof.core.code_stacks import StackBatch
from tfprof.core.errors import TraceFormatError
from tfprof.core.records import COLUMN_INDEX, DeviceInfo, RecordKind
from tfprof.readers.columns import sort_columns
from tfprof.readers.event_fields import us_to_ns
from tfprof.readers.trace import Event, RecordedTrace

_TIME_COLUMNS = ("kind", "start_ns", "duration_ns")


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
