"""The host-side advice rules (launch-bound, host-stalls, sync-per-step, memory-capacity),
each on a trace that triggers it and one that does not.

Real traces first: the Kineto traces' host stalls and per-step synchronisation, and
that neither is launch-bound in steady state. No shipped real trace is launch-bound or
has device memory records, so those two rules trigger on small Kineto files written
here and read by the real reader.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.kineto_memory import memory_trace
from tests.traces import shared_traces
from tfprof.collector.advice import (
    advise,
    host_stalls,
    launch_bound,
    memory_capacity,
    sync_per_step,
)
from tfprof.collector.read.stall_gaps import SYNC_CALL
from tfprof.collector.read.trace_job import job_from_trace

from .stored_jobs import catalog_of

KINETO = ["simple_add.json.gz", "event_sync_multi_stream.json.gz"]


def _findings(path: Path, rule: str) -> list[Any]:
    return advise(catalog_of([job_from_trace(path)]), [rule])[1]


def _kineto(name: str) -> Path:
    return shared_traces() / "kineto-hta" / name


def _tf() -> Path:
    return shared_traces() / "tf-timeline-ikhlestov" / "GPU_timeline_02_step_1.json"


def test_sync_call_names() -> None:
    sync = ["cudaDeviceSynchronize", "cudaStreamSynchronize", "cuCtxSynchronize",
            "cudaEventSynchronize", "cudaMemcpy", "cuMemcpyDtoH_v2", "cudaMemcpy2D"]  # fmt: skip
    not_sync = ["cudaMemcpyAsync", "cuMemcpyHtoDAsync_v2", "cudaLaunchKernel", "cudaEventQuery"]
    assert all(SYNC_CALL.search(n) for n in sync)
    assert not any(SYNC_CALL.search(n) for n in not_sync)


@pytest.mark.parametrize("name", KINETO)
def test_host_stalls_split_idle_gaps_by_what_the_host_did(name: str) -> None:
    (finding,) = _findings(_kineto(name), host_stalls.NAME)
    ev = finding.evidence
    parts = ev["in_sync_calls_us"] + ev["in_other_cuda_calls_us"] + ev["outside_cuda_us"]
    assert parts == pytest.approx(ev["idle_us"], abs=0.01)
    assert ev["idle_pct_of_span"] >= 100 * host_stalls.MIN_SHARE
    assert finding.impact_us == ev["idle_us"]


def test_no_host_stalls_without_api_records() -> None:
    assert _findings(_tf(), host_stalls.NAME) == []


def test_sync_per_step_counts_synchronising_calls_in_each_step() -> None:
    (finding,) = _findings(_kineto("simple_add.json.gz"), sync_per_step.NAME)
    ev = finding.evidence
    # The benchmark's outermost range holds every weight copy's cudaStreamSynchronize.
    assert ev["calls"] == {"cudaStreamSynchronize": 16, "cudaDeviceSynchronize": 4}
    assert ev["steps"] == 1 and ev["steps_from"] == "outermost host ranges"
    assert _findings(_kineto("event_sync_multi_stream.json.gz"), sync_per_step.NAME) == []


def _launches(tmp_path: Path, kernel_us: int, launch_us: int, n: int = 80) -> Path:
    events: list[dict[str, Any]] = []
    t = 0
    for i in range(n):
        corr = i + 1
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 9,
                "tid": 9,
                "ts": t,
                "dur": launch_us,
                "args": {"correlation": corr},
            }
        )
        events.append({"ph": "X", "cat": "kernel", "name": "tiny", "pid": 0, "tid": 7,
                       "ts": t + launch_us + 1, "dur": kernel_us,
                       "args": {"device": 0, "stream": 7, "correlation": corr}})  # fmt: skip
        t += launch_us + kernel_us + 2
    path = tmp_path / f"launch_{kernel_us}_{launch_us}.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_launch_bound_compares_launch_cpu_time_with_kernel_time(tmp_path: Path) -> None:
    (finding,) = _findings(_launches(tmp_path, kernel_us=8, launch_us=20), launch_bound.NAME)
    assert finding.evidence["kernels"] == 79  # the first launch of "tiny" is left out
    assert finding.evidence["launch_cpu_us"] == pytest.approx(79 * 20)
    assert finding.evidence["kernel_us"] == pytest.approx(79 * 8)
    assert _findings(_launches(tmp_path, kernel_us=100, launch_us=20), launch_bound.NAME) == []
    # Real traces: simple_add's 4 s in launches is its first cuDNN launch (module loading).
    assert _findings(_kineto("simple_add.json.gz"), launch_bound.NAME) == []


def test_memory_capacity_flags_a_peak_near_the_gpus_memory(tmp_path: Path) -> None:
    (finding,) = _findings(memory_trace(tmp_path, capacity=4200), memory_capacity.NAME)
    assert finding.evidence["peak_bytes"] == 4000 and finding.evidence["peak_pct"] > 90
    assert _findings(memory_trace(tmp_path, capacity=5000), memory_capacity.NAME) == []
    # Real traces without MEMORY records: nothing to say.
    assert _findings(_kineto("simple_add.json.gz"), memory_capacity.NAME) == []
