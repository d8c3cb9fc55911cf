"""The collectives, steps and ranks views on the shipped multi-GPU Kineto traces, read
through the read engine, with the figures the research notes derived from the files by
hand (Python's json over the file: counts, sizes, groups per source)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tfprof.collector.analysis.collective_rows import CollectivesNeed
from tfprof.collector.analysis.comm_kernels import is_comm, parse
from tfprof.collector.analysis.step_rows import RanksNeed, StepsNeed, warmup_flags
from tfprof.collector.lake.dist_sql import COMM_NAME
from tfprof.collector.read import engine
from tfprof.collector.read.lake_catalog import catalog
from tfprof.collector.read.needs import Need
from tfprof.collector.read.trace_files import read_trace_files
from tfprof.collector.timeline.prepare import TimeWindow

DIST = Path(__file__).resolve().parents[1] / "data" / "traces" / "kineto-hta-dist"
OF2 = DIST / "nccl_allreduce_rank0_of2.json.gz"
OF16 = DIST / "rank0_of16.json.gz"
# A one-rank PyTorch/NCCL job recorded live on an H200 (tests/data/recorded/README.md).
ONE_RANK = Path(__file__).resolve().parents[1] / "data/recorded/h200/torch_nccl_one_rank.json.gz"


def _read(path: Path, need: Need[Any]) -> Any:
    cat = catalog(read_trace_files([path]).jobs, TimeWindow())
    _, (rows,) = engine.read(cat, [need])
    return rows


NAMES = [
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
     "AllReduce", "RING"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", "SendRecv", ""),
    ("ncclKernel_ReduceScatter_TREE_LL_Sum___nv_bfloat16(ncclDevComm*)", "ReduceScatter", "TREE"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "AllReduce",
     "not TREE"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "AllGather",
     "not TREE"),
    ("ncclDevKernel_Reduce_Sum_u64_TREE_LL(ncclDevKernelArgsStorage<4096ul>)", "Reduce", "TREE"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "SendRecv", ""),
    ("ncclDevKernel_Generic(ncclDevComm*, channelMasks, ncclWork*)", "Generic", ""),
    ("ncclSymkDevKernel_AllReduce_RSxLD_AGxST_sum_bf16(ncclSymkDevWorkArgs4K)", "AllReduce",
     "RSxLD_AGxST"),
    ("nccldevkernel_allreduce_sum_f32_ring_ll", "AllReduce", "not TREE"),
    # NCCL 2.28 on one rank, an average (recorded on an H200): no collective in the name
    ("__nv_static_32__b4148644_10_onerank_cu_fdf47990__ZN43_GLOBAL__N__b4148644_10_onerank_cu"
     "_fdf4799013oneRankReduceI13FuncPreMulSumIfEEEvPvS3_mmb", "Generic", ""),
]  # fmt: skip


@pytest.mark.parametrize(("name", "collective", "algorithm"), NAMES)
def test_kernel_names_say_collective_and_algorithm(
    name: str, collective: str, algorithm: str
) -> None:
    kernel = parse(name)
    assert kernel is not None
    assert (kernel.collective, kernel.algorithm) == (collective, algorithm)


def test_compute_kernels_are_not_communication() -> None:
    for name in ("void at::native::vectorized_elementwise_kernel<4>", "Memcpy DtoH",
                 "sm80_xmma_gemm_f16f16", "ncclAllReduce"):  # fmt: skip
        assert not is_comm(name) and parse(name) is None
    # the SQL side's test is the same on the names above
    import duckdb

    for name, *_ in NAMES:
        sql = COMM_NAME.replace("@N@", "?")
        assert duckdb.execute(f"SELECT {sql}", [name] * sql.count("?")).fetchone() == (True,)


def test_collectives_of_the_ddp_trace_come_from_kineto_args() -> None:
    rows = _read(OF2, CollectivesNeed())
    by_type = {r.collective: r for r in rows}
    assert set(by_type) == {"allreduce", "broadcast"}
    allreduce = by_type["allreduce"]
    # 15 all-reduces of Float: sum of In msg nelems x 4 bytes (json over the file)
    assert (allreduce.calls, allreduce.bytes, allreduce.group) == (15, 306_684_384, "0")
    assert allreduce.group_size == 2 and allreduce.algorithm == "RING"
    assert allreduce.source == ["args 15"]
    assert 0 < allreduce.exposed_us <= allreduce.time_us
    assert by_type["broadcast"].calls == 6


def test_collectives_of_sendrecv_kernels_come_from_pytorch_annotations() -> None:
    rows = _read(OF16, CollectivesNeed())
    got = {(r.group, r.collective): r.calls for r in rows}
    # every collective of this job ran as a SendRecv kernel: the nccl:<op> range its
    # launch ran inside says which (5 were launched before the capture: name only)
    assert got == {
        ("stream:84", "allreduce"): 10, ("stream:84", "alltoall"): 25,
        ("stream:84", "sendrecv"): 1, ("stream:285", "allgather"): 10,
        ("stream:285", "reducescatter"): 10, ("stream:285", "sendrecv"): 2,
        ("stream:363", "alltoall"): 20, ("stream:363", "sendrecv"): 2,
    }  # fmt: skip
    assert all(r.bytes is None and r.busbw_gbps is None for r in rows)


def test_steps_of_profiler_step_ranges_exclude_the_last_one() -> None:
    rows = _read(OF16, StepsNeed())
    # ProfilerStep#550-554 captured; the last one's work is cut off by the capture's end
    assert [r.step for r in rows] == [550, 551, 552, 553]
    assert {r.source for r in rows} == {"ProfilerStep"}
    assert [r.warmup for r in rows] == [True, False, False, False]
    for r in rows:
        parts = r.compute_us + r.comm_exposed_us + r.copy_exposed_us + r.idle_us
        assert parts == pytest.approx(r.duration_us, abs=0.01)
        split = r.idle_foreign_us + r.idle_sync_us + r.idle_other_cuda_us
        assert split + r.idle_outside_cuda_us == pytest.approx(r.idle_us, abs=0.01)
    # the first captured step runs GPU work launched before the capture (foreign)
    assert rows[0].idle_foreign_us > 0 and rows[1].idle_foreign_us == 0
    # blocking device-to-host copies make most of this job's idle time sync time
    assert all(r.idle_sync_us > r.idle_outside_cuda_us for r in rows[1:])


def test_ranks_figures_are_over_the_complete_steps() -> None:
    (rank,) = _read(OF2, RanksNeed())
    assert (rank.steps, rank.steady_steps, rank.warmup_steps) == (2, 1, [4])
    # HTA 0.5.0 without its microsecond rounding (research notes): 14.76 / 17.66 / 5.10
    assert (rank.overlap_pct, rank.compute_pct, rank.non_compute_pct) == (14.76, 17.66, 5.10)
    assert rank.idle_pct == 77.23


def test_warmup_is_the_first_step_and_the_slow_ones() -> None:
    assert warmup_flags([300, 100, 100, 160, 90]) == [True, False, False, True, False]
    assert warmup_flags([]) == []


def test_steps_without_markers_come_from_the_kernel_period(tmp_path: Path) -> None:
    import gzip
    import json

    with gzip.open(OF2, "rt") as fh:
        trace = json.load(fh)
    for e in trace["traceEvents"]:  # the job as a framework without step ranges
        if str(e.get("name", "")).startswith("ProfilerStep#"):
            e["name"] = "train_loop"
    bare = tmp_path / "no_steps.json.gz"
    with gzip.open(bare, "wt") as fh:
        json.dump(trace, fh)
    marked = _read(OF2, StepsNeed())
    found = _read(bare, StepsNeed())
    assert {r.source for r in found} == {"periodicity"}
    # three ProfilerSteps, two complete: the period finds as many, of the same length
    assert len(found) == len(marked) == 2
    for a, b in zip(found, marked, strict=True):
        assert a.duration_us == pytest.approx(b.duration_us, rel=0.05)


def test_one_rank_nccl_averages_are_all_reduces_by_nccls_own_ranges() -> None:
    """Live CUPTI records carry no collective args; NCCL's NVTX range (``ncclAllReduce``)
    the launching call ran inside says what its ``oneRankReduce`` kernel did: the 24
    averaged all-reduces of the job (12 steps x 2 gradients; its sums ran no kernel)."""
    (row,) = _read(ONE_RANK, CollectivesNeed())
    assert (row.collective, row.calls, row.source) == ("allreduce", 24, ["annotation 24"])
    assert row.ranks == 1 and row.bytes is None
