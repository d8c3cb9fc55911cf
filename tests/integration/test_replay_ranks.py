"""Replay as ranks, end to end: real launchers and a real collector, N real processes that
each declare a rank (a shell starts them, as mpirun or srun would), replaying a real
multi-GPU PyTorch trace (NCCL all-reduce, 2-rank DDP job).

Every rank replays the trace once, as its own task, from the run's one origin: the
stored records of the ranks line up to the nanosecond although the processes started
up to a second apart; a rank started with ``TFPROF_REPLAY_STRETCH=1.3`` has every time
stretched around that origin (a straggler made from a real trace).
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tfprof.collector.jobdata import StreamData
from tfprof.collector.store import Store
from tfprof.core import collectives
from tfprof.core.records import RecordKind

from .conftest import Collector, agent_cmd, clean_env

pytestmark = pytest.mark.timeout(300)

OF2 = "kineto-hta-dist/nccl_allreduce_rank0_of2.json.gz"
STRETCHED = 3  # the rank replayed 1.3 times slower


def start_ranks(address: str, job: str, source: str, *options: str) -> subprocess.Popen[str]:
    """``tfprof-agent run`` of a shell that starts ranks 0-3, 0.4 s apart (rank 3
    stretched 1.3x); each is a Python process that only sleeps."""
    script = (
        "for r in 0 1 2; do RANK=$r \"$PY\" -c 'import time; time.sleep(1)' & sleep 0.4; done; "
        f"TFPROF_REPLAY_STRETCH=1.3 RANK={STRETCHED} \"$PY\" -c 'import time; time.sleep(1)' & "
        "wait"
    )
    return subprocess.Popen(
        agent_cmd("run", "--collector", address, "--job", job, "--source", source,
                  *options, "--", "bash", "-c", script),
        env=clean_env(PY=sys.executable), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def times(stream: StreamData) -> tuple[np.ndarray, np.ndarray]:
    """(start on the collector's clock, duration) of every record, in stored order."""
    r = stream.records
    return r["start_ns"] + stream.record_shift_ns, r["duration_ns"]


def test_every_rank_replays_once_from_the_runs_origin(traces: Path, collector: Collector) -> None:
    proc = start_ranks(collector.address, "ranks", f"replay:{traces / OF2}",
                       "--replay-speed", "max")  # fmt: skip
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    (job,) = Store(collector.data_dir).load_jobs(["ranks"])
    by_task = {s.task: s for s in job.streams}
    assert sorted(by_task) == ["0", "1", "2", "3"]  # one replay per rank, none rankless
    assert len({s.pid for s in job.streams}) == 4
    start0, dur0 = times(by_task["0"])
    assert len(start0) > 10_000
    for task in ("1", "2"):
        start, dur = times(by_task[task])
        # The same trace, from the same origin: every record at the same nanosecond.
        assert int(np.abs(start - start0).max()) == 0
        assert np.array_equal(dur, dur0)
    # Rank 3: every time 1.3x as far from the origin (the trace's first record, at the
    # origin on every rank), every duration 1.3x as long; rounding keeps each within 1 ns.
    start3, dur3 = times(by_task[str(STRETCHED)])
    origin = int(start0.min())
    assert int(start3.min()) == origin
    want = origin + np.round((start0 - origin) * 1.3).astype(np.int64)
    assert int(np.abs(np.sort(start3) - np.sort(want)).max()) <= 1
    assert int(np.abs(np.sort(dur3) - np.sort(np.round(dur0 * 1.3).astype(np.int64))).max()) <= 1
    assert (start3.max() - origin) > 1.29 * (start0.max() - origin)
    # Kineto's collective args came through the wire with every NCCL kernel of each rank.
    for task, stream in by_task.items():
        r = stream.records
        named = r["collective"][r["kind"] == RecordKind.KERNEL]
        kinds = Counter(collectives.parse(stream.strings[i])["collective"] for i in named if i)
        assert kinds == {"allreduce": 15, "broadcast": 6}, task
