"""``summary --view ranks`` agrees with HolisticTraceAnalysis 0.5.0 per rank: the
comm/compute overlap (``get_comm_comp_overlap``) and the temporal breakdown
(``get_temporal_breakdown``: compute, non-compute, idle) within 1 percentage point, on the
shipped multi-GPU Kineto traces and on a 2-rank job whose rank 1 is stretched 1.3x.

Both run as users run them: HTA's TraceAnalysis on a folder of the rank files, ours as
``import`` (files that name their rank are the ranks of one job) then ``summary --view
ranks --format json``. What differs is HTA's rounding of fractional microseconds (it
rounds starts up and ends down, ``HTA_DISABLE_NS_ROUNDING``), worth up to 0.5 point here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.unit.dist_traces import DIST, TRACES, stretched

hta_trace_analysis = pytest.importorskip("hta.trace_analysis")

PAIRS = TRACES / "hta-trace-diff" / "trace_diff"
TOLERANCE_PP = 1.0


def _folder(tmp: Path, case: str) -> Path:
    folder = tmp / case
    folder.mkdir()
    if case == "of2_rank1_stretched":
        stretched(DIST / "nccl_allreduce_rank0_of2.json.gz", folder / "rank0.json.gz", 0, 1.0)
        stretched(DIST / "nccl_allreduce_rank0_of2.json.gz", folder / "rank1.json.gz", 1, 1.3)
    else:
        src = {
            "of2": DIST / "nccl_allreduce_rank0_of2.json.gz",
            "of16": DIST / "rank0_of16.json.gz",
            "trace_diff_control": PAIRS / "control" / "control.json.gz",
            "trace_diff_test": PAIRS / "test" / "test.json.gz",
        }[case]
        shutil.copy(src, folder / src.name)
    return folder


def _hta(folder: Path) -> dict[int, dict[str, float | None]]:
    analysis = hta_trace_analysis.TraceAnalysis(trace_dir=str(folder))
    temporal = analysis.get_temporal_breakdown(visualize=False)
    overlap = analysis.get_comm_comp_overlap(visualize=False)
    out: dict[int, dict[str, float | None]] = {}
    for _, row in temporal.iterrows():
        out[int(row["rank"])] = {
            "compute_pct": float(row["compute_time_pctg"]),
            "non_compute_pct": float(row["non_compute_time_pctg"]),
            "idle_pct": float(row["idle_time_pctg"]),
        }
    for _, row in overlap.iterrows():
        value = float(row["comp_comm_overlap_pctg"])
        out[int(row["rank"])]["overlap_pct"] = None if value != value else value
    return out


def _ours(folder: Path, data: Path) -> dict[int, dict[str, Any]]:
    cli = [sys.executable, "-m", "tfprof.collector.cli"]
    files = sorted(str(p) for p in folder.iterdir())
    subprocess.run([*cli, "import", *files, "--job", "dist", "--data-dir", str(data)],
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    select = ("task,overlap_pct,compute_pct,non_compute_pct,idle_pct,idle_foreign_pct,"
              "idle_sync_pct,idle_other_cuda_pct,idle_outside_cuda_pct")  # fmt: skip
    run = subprocess.run(
        [*cli, "summary", "--data-dir", str(data), "--view", "ranks", "--format", "json",
         "--select", select],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return {int(r["task"]): r for r in json.loads(run.stdout)["rows"]}


@pytest.mark.parametrize(
    "case", ["of2", "of16", "trace_diff_control", "trace_diff_test", "of2_rank1_stretched"]
)
def test_ranks_view_agrees_with_hta_per_rank(case: str, tmp_path: Path) -> None:
    folder = _folder(tmp_path, case)
    theirs = _hta(folder)
    ours = _ours(folder, tmp_path / "data")
    assert set(ours) == set(theirs) and ours
    for rank, figures in theirs.items():
        mine = ours[rank]
        for key, value in figures.items():
            if value is None:  # HTA: no NCCL kernel on the rank
                assert mine[key] is None, (case, rank, key)
                continue
            assert abs(mine[key] - value) <= TOLERANCE_PP, (case, rank, key, mine[key], value)
        # the idle split adds up to the idle time, and the parts to the step time
        parts = ("idle_foreign_pct", "idle_sync_pct", "idle_other_cuda_pct",
                 "idle_outside_cuda_pct")  # fmt: skip
        assert abs(sum(mine[p] for p in parts) - mine["idle_pct"]) <= 0.05
        total = mine["compute_pct"] + mine["non_compute_pct"] + mine["idle_pct"]
        assert abs(total - 100.0) <= 0.05
