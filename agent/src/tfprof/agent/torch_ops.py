"""PyTorch op ranges without a code change: when the job imports ``torch``, turn on the
NVTX ranges ``torch.autograd.profiler.emit_nvtx`` would, so every ATen op becomes an
NVTX range (a MARKER row) that the kernels it launched fall inside.

The hook installs ``TorchImportWatcher`` on ``sys.meta_path``. It answers only for the
top-level name ``torch`` and only once: it finds torch's spec through the other finders,
wraps the loader so that ``enable_op_ranges`` runs right after torch's own module code,
and removes itself. A job that never imports torch pays one failed name comparison per
top-level import. Standard library only; nothing here imports torch itself.

What ``enable_op_ranges`` calls is ``emit_nvtx.__enter__`` without its
``torch.cuda.synchronize()`` (that would initialise CUDA at import time, which breaks
fork-based workers and fails on CPU-only builds). PyTorch's NVTX callbacks are thread
local: the importing thread and the autograd threads it starts (which inherit it) are
covered, other threads are not. Tested here against a stand-in module named ``torch``;
the real route needs PyTorch 2.x and was not run on this project's machines.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

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


class _NotifyingLoader:
    """torch's own loader, with ``on_loaded`` called once its module code has run."""

    def __init__(self, loader: Any, on_loaded: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._on_loaded = on_loaded

    def create_module(self, spec: Any) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        # torch sees its real loader, as without us.
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._on_loaded(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class TorchImportWatcher:
    """A ``sys.meta_path`` finder that calls ``on_import(torch)`` once torch is imported.

    ``on_import`` must not raise (``install`` wraps it)."""

    def __init__(self, on_import: Callable[[ModuleType], None]) -> None:
        self._on_import = on_import

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> Any:
        if fullname != TORCH:
            return None
        self.remove()  # once: a failed import of torch is not retried by us
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _NotifyingLoader(spec.loader, self._on_import)
                return spec
        return None

    def remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


def install(warn: Callable[[str], None]) -> TorchImportWatcher | None:
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

    already = sys.modules.get(TORCH)
    if already is not None:
        on_import(already)
        return None
    watcher = TorchImportWatcher(on_import)
    sys.meta_path.insert(0, watcher)
    return watcher
