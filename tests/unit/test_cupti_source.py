"""The CUPTI source's lifecycle (sources/cupti.py): bind, the buffer callbacks, start
and stop with and without a driver, driven with genuine cupti-python record objects
(tests/unit/agent_cupti_fakes.py). The GPU test runs where a driver is present; the
decoding itself is tested in test_agent_cupti_records.py.
"""

from __future__ import annotations

import sys
import time

import pytest
from cupti import cupti

from tests.unit.agent_cupti_fakes import (
    AK,
    RecordingSink,
    bound_source,
    fill_kernel,
    fill_memcpy,
)
from tfprof.agent.inprocess.sources.base import SourceUnavailable
from tfprof.agent.inprocess.sources.cupti import CuptiSource
from tfprof.agent.inprocess.sources.cupti_errors import driver_cuda_version
from tfprof.agent.inprocess.sources.cupti_loading import not_installed
from tfprof.core.records import RecordKind

HAVE_DRIVER = driver_cuda_version() is not None


def test_callback_swallows_failures_counts_them_and_warns_once() -> None:
    sink = RecordingSink(fail_submit=True)
    source = bound_source(sink)
    recs = [fill_kernel(cupti.ActivityKernel11()), fill_memcpy(cupti.ActivityMemcpy6())]
    source.buffer_completed(recs)  # must not raise into CUPTI
    source.buffer_completed(recs[:1])
    assert sink.dropped == 3
    assert source.dropped == 3
    assert len(sink.warnings) == 1
    assert "queue exploded" in sink.warnings[0]


def test_callback_before_bind_is_a_no_op() -> None:
    CuptiSource().buffer_completed([fill_kernel(cupti.ActivityKernel11())])


def test_buffer_requested_asks_for_large_buffers() -> None:
    assert CuptiSource().buffer_requested() == (8 << 20, 0)
    assert CuptiSource(buffer_bytes=32 << 20).buffer_requested() == (32 << 20, 0)


@pytest.mark.skipif(HAVE_DRIVER, reason="a CUDA driver is present")
def test_start_without_driver_raises_one_clear_line_and_enables_nothing() -> None:
    source = CuptiSource()
    with pytest.raises(SourceUnavailable) as info:
        source.start(RecordingSink())
    message = str(info.value)
    assert "no CUDA driver found (libcuda.so.1" in message
    assert "\n" not in message
    assert source.enabled_kinds == ()
    assert isinstance(info.value.__cause__, RuntimeError)  # the real NotSupportedError
    source.stop(time.monotonic() + 1)  # after a failed start: nothing to do, no raise


@pytest.mark.skipif(HAVE_DRIVER, reason="a CUDA driver is present")
def test_tracer_clock_without_driver_is_none() -> None:
    assert CuptiSource().tracer_clock_ns() is None


def test_stop_before_start_never_raises() -> None:
    CuptiSource().stop(time.monotonic())


def test_missing_cupti_python_is_source_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupti", None)  # import cupti -> ImportError
    with pytest.raises(SourceUnavailable, match=r"^cupti-python is not installed") as info:
        CuptiSource().start(RecordingSink())
    assert str(info.value) == not_installed()
    # The one line names the exact install command for this interpreter.
    assert f"`{sys.executable} -m pip install cupti-python`" in str(info.value)


def test_importing_the_module_does_not_import_cupti() -> None:
    import subprocess

    code = (
        "import sys, tfprof.agent.inprocess.sources.cupti; "
        "sys.exit(1 if 'cupti' in sys.modules or 'numpy' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


GPU_WORKLOAD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from agent_cupti_fakes import RecordingSink
from tfprof.agent.inprocess.sources.cupti import CuptiSource

sink = RecordingSink()
source = CuptiSource()
source.start(sink)  # before CUDA initialises, as the hook does at start-up
clock = source.tracer_clock_ns()
wall = time.time_ns()
import torch

a = torch.randn(512, 512, device="cuda")
b = (a @ a).relu()
host = b.cpu()
torch.cuda.synchronize()
source.stop(time.monotonic() + 10)
rows = sink.rows()
print(json.dumps({
    "rows": rows,
    "names": {r["name"]: sink.name(r["name"]) for r in rows},
    "devices": sink.devices,
    "clock_minus_wall": clock - wall,
    "enabled_after_stop": list(source.enabled_kinds),
    "warnings": sink.warnings,
    "dropped": source.dropped,
}))
"""


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_DRIVER, reason="needs a CUDA driver and GPU")
def test_traces_a_real_cuda_workload() -> None:
    import json
    import os
    import subprocess

    pytest.importorskip("torch")
    # A fresh interpreter: CUPTI must be armed before CUDA initialises (DEVICE records
    # only come then), exactly as the hook does it.
    done = subprocess.run(
        [sys.executable, "-c", GPU_WORKLOAD, os.path.dirname(__file__)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    rows = out["rows"]
    kernels = [r for r in rows if r["kind"] == RecordKind.KERNEL]
    assert kernels, "no kernel records"
    assert all(out["names"][str(r["name"])] for r in kernels)
    assert all(r["grid_x"] > 0 and r["block_x"] > 0 for r in kernels)
    dtoh = [r for r in rows if r["kind"] == RecordKind.MEMCPY and r["copy_kind"] == 2]
    assert any(r["bytes"] == 512 * 512 * 4 for r in dtoh)
    assert all(r["duration_ns"] >= 0 and r["start_ns"] > 0 for r in rows)
    assert out["devices"] and out["devices"][0]["uuid"].startswith("GPU-")
    assert abs(out["clock_minus_wall"]) < 10**9
    assert out["enabled_after_stop"] == []
    assert out["warnings"] == [] and out["dropped"] == 0


def test_synchronization_is_among_the_kinds_tried() -> None:
    from tfprof.agent.inprocess.sources.cupti_kinds import kinds_to_enable, optional_kinds

    assert int(AK.SYNCHRONIZATION) in optional_kinds(cupti)
    assert int(AK.SYNCHRONIZATION) not in kinds_to_enable(cupti)  # never fatal
