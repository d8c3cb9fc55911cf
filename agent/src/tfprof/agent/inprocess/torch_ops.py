"""PyTorch op ranges without a code change: when the job imports ``torch``, turn on the
NVTX ranges ``torch.autograd.profiler.emit_nvtx`` would, so every ATen op becomes an
NVTX range (a MARKER row) that the kernels it launched fall inside.

The hook asks ``post_import.when_imported`` to run ``enable_op_ranges`` right after
torch's own module code (the same watcher the TensorFlow op route uses: it answers only
for watched top-level names, once, and removes itself). A job that never imports torch
pays one dictionary lookup per top-level import. Standard library only; nothing here
imports torch itself.

What ``enable_op_ranges`` calls is ``emit_nvtx.__enter__`` without its
``torch.cuda.synchronize()`` (that would initialise CUDA at import time, which breaks
fork-based workers and fails on CPU-only builds). PyTorch's NVTX callbacks are thread
local: the importing thread and the autograd threads it starts (which inherit it) are
covered, other threads are not. Tested here against a stand-in module named ``torch``;
the real route needs PyTorch 2.x and was not run on this project's machines.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from tfprof.agent.inprocess import post_import

TORCH = "torch"


def enable_op_ranges(torch: ModuleType) -> None:
    """What ``emit_nvtx(record_shapes=False).__enter__()`` does, minus its synchronize.
    Raises whatever an unexpected PyTorch raises; the caller reports it."""
    profiler: Any = __import__("torch.autograd.profiler", fromlist=["_enable_profiler"])
    start_hooks = getattr(profiler, "_run_on_profiler_start", None)
    if start_hooks is not None:  # PyTorch 2.1 and later
        start_hooks()
    profiler._enable_profiler(
        profiler.ProfilerConfig(
            profiler.ProfilerState.NVTX,
            False,  # record_shapes
            False,  # profile_memory
            False,  # with_stack
            False,  # with_flops
            False,  # with_modules
            profiler._ExperimentalConfig(),
        ),
        set(),
    )


def install(warn: Callable[[str], None]) -> None:
    """Turn on PyTorch's op ranges when torch is imported (now, if it already is).
    Failures are one ``warn`` line; the job and its import of torch carry on."""

    def on_import(torch: ModuleType) -> None:
        try:
            enable_op_ranges(torch)
        except Exception as exc:
            version = getattr(torch, "__version__", "unknown version")
            warn(
                f"could not turn on PyTorch op ranges (torch {version}: "
                f"{type(exc).__name__}: {exc}); kernels are not attributed to ops"
            )

    post_import.when_imported(TORCH, on_import)
