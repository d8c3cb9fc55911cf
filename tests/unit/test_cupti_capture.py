"""Capture windows in the CUPTI source (sources/cupti.py ``set_capturing``): without a
driver every cupti call raises its real error, which a window reports once and
survives; with a driver (GPU machines) windows switch real kernels on and off, and
re-arm after ``finalize``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from cupti import cupti

from tests.unit.agent_cupti_fakes import AK, RecordingSink, bound_source
from tfprof.agent.inprocess.sources.base import SourceUnavailable
from tfprof.agent.inprocess.sources.cupti import CuptiSource
from tfprof.agent.inprocess.sources.cupti_errors import driver_cuda_version
from tfprof.agent.inprocess.sources.cupti_kinds import (
    arming_kinds,
    kinds_to_enable,
    optional_kinds,
    window_kinds,
)

HAVE_DRIVER = driver_cuda_version() is not None


def test_windows_switch_per_operation_kinds_and_arming_keeps_device_kinds() -> None:
    window = set(window_kinds(cupti)) | set(optional_kinds(cupti))
    arming = set(arming_kinds(cupti))
    assert int(AK.CONCURRENT_KERNEL) in window and int(AK.MEMCPY) in window
    assert arming == {int(AK.DEVICE), int(AK.CONTEXT)}  # no per-operation record
    assert not window & arming
    assert set(kinds_to_enable(cupti)) == set(window_kinds(cupti)) | arming


@pytest.mark.skipif(HAVE_DRIVER, reason="a CUDA driver is present")
def test_arming_idle_without_driver_is_source_unavailable() -> None:
    source = CuptiSource()
    with pytest.raises(SourceUnavailable, match="no CUDA driver found"):
        source.start(RecordingSink(), capturing=False)
    assert source.enabled_kinds == ()


@pytest.mark.skipif(HAVE_DRIVER, reason="a CUDA driver is present")
def test_a_window_that_cannot_open_warns_once_and_leaves_nothing_enabled() -> None:
    sink = RecordingSink()
    source = bound_source(sink)
    source.set_capturing(True, time.time_ns())  # cupti.activity_enable raises, for real
    source.set_capturing(False, time.time_ns())
    source.set_capturing(True, time.time_ns())
    assert source.enabled_kinds == ()
    assert len(sink.warnings) == 1
    assert sink.warnings[0].startswith("cannot open a capture window: no CUDA driver found")
    source.stop(time.monotonic() + 1)  # nothing to flush, no raise


def test_windows_before_bind_or_closing_an_idle_source_do_nothing() -> None:
    source = CuptiSource(finalize_after_window=True)
    source.set_capturing(True, 0)  # not bound: no cupti module to call
    sink = RecordingSink()
    bound = bound_source(sink)
    bound.set_capturing(False, 0)  # not capturing: no flush, no finalize
    assert sink.warnings == [] and bound.enabled_kinds == ()


GPU_WINDOWS = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from agent_cupti_fakes import RecordingSink
from tfprof.agent.inprocess.sources.cupti import CuptiSource
from tfprof.core.records import RecordKind

sink = RecordingSink()
source = CuptiSource(finalize_after_window=sys.argv[2] == "1")
source.start(sink, capturing=False)
import torch

x = torch.randn(256, 256, device="cuda")
torch.cuda.synchronize()

def launch(n):
    for _ in range(n):
        torch.mul(x, 2.0, out=x)
    torch.cuda.synchronize()

def kernels():
    return sum(1 for r in sink.rows() if r["kind"] == RecordKind.KERNEL)

counts = []
launch(7)                          # idle: armed, nothing captured
counts.append(kernels())
for n in (5, 3):                   # two windows; with finalize, re-armed for the second
    source.set_capturing(True, time.time_ns())
    launch(n)
    source.set_capturing(False, time.time_ns())
    counts.append(kernels())
    launch(4)                      # between windows: not captured
counts.append(kernels())
source.stop(time.monotonic() + 10)
print(json.dumps({"counts": counts, "warnings": sink.warnings,
                  "devices": len(sink.devices), "enabled": list(source.enabled_kinds)}))
"""


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_DRIVER, reason="needs a CUDA driver and GPU")
@pytest.mark.parametrize("finalize", ["0", "1"])
def test_windows_capture_exactly_the_kernels_launched_inside_them(finalize: str) -> None:
    pytest.importorskip("torch")
    done = subprocess.run(
        [sys.executable, "-c", GPU_WINDOWS, os.path.dirname(__file__), finalize],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["counts"] == [0, 5, 8, 8]
    assert out["warnings"] == [] and out["enabled"] == []
    assert out["devices"] >= 1  # DEVICE stays armed: windows carry the GPU's identity
