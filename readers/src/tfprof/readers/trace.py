"""What every trace reader shares: the imported trace (``RecordedTrace``), the formats.

The record builder is ``trace_builder``'s, parsing event fields ``event_fields``'.

Times: ``ts``/``dur`` are (possibly fractional) µs. JSON floats are parsed as
``Decimal`` so ns survive exactly at epoch magnitudes (a float64 of 1.7e15 µs only
resolves 0.25 µs), then rounded half-even to integer ns. Starts are made relative to
the earliest record (which starts at 0; a host range may open before the first GPU
event) and records are sorted by start.
"""

from __future__ import annotations

import array
from typing import Any

from tfprof.core.code_stacks import StackBatch
from tfprof.core.records import COLUMNS, DeviceInfo, RecordTable
from tfprof.core.slice_args import CATEGORIES, category_of

FORMAT_TF_TIMELINE = "tf-timeline"
FORMAT_KINETO = "kineto"
FORMAT_TFPROF = "tfprof"

# One Chrome trace event as parsed from JSON (or built by a binary format's reader).
Event = dict[str, Any]


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
