"""Where each track goes in the trace: pids, tids, process and thread names, sort order.

``group_by="job"`` makes each track a process of its own (lanes are its threads);
``group_by="gpu"`` puts every job's tracks under the physical GPU (by UUID) they ran
on, one thread per lane, so jobs sharing a GPU can be seen side by side. In both, a
task's host is a process of its own, ``/job:J/task:T/cpu``: its counters, and one thread
per lane of each host thread track (``thread:TID``, ``thread:TID lane K``).
"""

from __future__ import annotations

from tfprof.collector.timeline.model import GroupBy, TraceProcess

HOST_SORT_BASE = 1 << 20


class Layout:
    """Hands out pids, tids, names and sort indices for either grouping.

    Pids and tids start at 1 and tids are unique across the whole trace: Perfetto treats
    pid 0 as the kernel's swapper and has merged tid 0 with other threads. Tracks are
    placed one task at a time; with ``group_by="gpu"`` a later task may still add a GPU
    process, so hosts sort from ``HOST_SORT_BASE`` on: after every GPU, whenever made.
    """

    def __init__(self, group_by: GroupBy) -> None:
        self.group_by = group_by
        self._procs: list[TraceProcess] = []
        self._gpu_pid: dict[str, int] = {}
        self._host_pid: dict[str, int] = {}
        self._next_tid = 1

    def _tids(self, count: int) -> tuple[int, ...]:
        first = self._next_tid
        self._next_tid += count
        return tuple(range(first, first + count))

    def _new_process(self, name: str, sort_index: int | None = None) -> int:
        pid = len(self._procs) + 1
        index = len(self._procs) if sort_index is None else sort_index
        self._procs.append(TraceProcess(pid, name, index))
        return pid

    def place_slices(
        self, track: str, num_lanes: int, uuid: str, device_name: str
    ) -> tuple[int, tuple[int, ...], tuple[str, ...]]:
        """(pid, tid per lane, thread name per lane) of a slice track."""
        tids = self._tids(num_lanes)
        if self.group_by == "job":
            return self._new_process(track), tids, tuple(f"lane {k}" for k in range(num_lanes))
        pid = self._gpu_pid.get(uuid)
        if pid is None:
            label = f"/gpu:{uuid} ({device_name})" if device_name else f"/gpu:{uuid}"
            pid = self._gpu_pid[uuid] = self._new_process(label)
        names = tuple(track if k == 0 else f"{track} lane {k}" for k in range(num_lanes))
        return pid, tids, names

    def host_pid(self, name: str) -> int:
        """The pid of a task's host process ``name`` (``/job:J/task:T/cpu``), made once."""
        pid = self._host_pid.get(name)
        if pid is None:
            late = HOST_SORT_BASE + len(self._host_pid) if self.group_by == "gpu" else None
            pid = self._host_pid[name] = self._new_process(name, late)
        return pid

    def place_host(self, name: str) -> tuple[int, int]:
        """(pid, tid) of a task's host counters: in its host process, either grouping."""
        return self.host_pid(name), self._tids(1)[0]

    def place_thread(
        self, host: str, thread: int, num_lanes: int
    ) -> tuple[int, tuple[int, ...], tuple[str, ...]]:
        """(pid, tid per lane, thread name per lane) of one host thread's track."""
        label = f"thread:{thread}"
        names = tuple(label if k == 0 else f"{label} lane {k}" for k in range(num_lanes))
        return self.host_pid(host), self._tids(num_lanes), names

    def processes(self) -> list[TraceProcess]:
        return list(self._procs)
