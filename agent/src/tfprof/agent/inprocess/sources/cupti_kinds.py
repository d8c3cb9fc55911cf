"""The CUPTI activity kinds the source enables: on from start, per capture window,
optional, and host-side."""

from __future__ import annotations

from types import ModuleType


def arming_kinds(cupti: ModuleType) -> list[int]:
    """Kinds that make a record only when a device or context appears, never per
    operation: on from start in every capture mode, so a window's records carry the
    GPU's identity even when the window opens long after CUDA initialised."""
    kind = cupti.ActivityKind
    return [int(kind.DEVICE), int(kind.CONTEXT)]


def window_kinds(cupti: ModuleType) -> list[int]:
    """Kinds that make a record per GPU operation: what a capture window turns on."""
    kind = cupti.ActivityKind
    # CONCURRENT_KERNEL, never KERNEL: the latter serialises every kernel on the GPU.
    return [int(kind.CONCURRENT_KERNEL), int(kind.MEMCPY), int(kind.MEMCPY2), int(kind.MEMSET)]


def kinds_to_enable(cupti: ModuleType) -> list[int]:
    return window_kinds(cupti) + arming_kinds(cupti)


def optional_kinds(cupti: ModuleType) -> list[int]:
    """Kinds enabled when the driver accepts them; refusing one never stops tracing."""
    return [int(cupti.ActivityKind.SYNCHRONIZATION)]


def host_kinds(cupti: ModuleType) -> list[int]:
    """The host-side kinds a capture window also switches (enabled per their switches)."""
    ak = cupti.ActivityKind
    return [int(getattr(ak, name)) for name in ("RUNTIME", "DRIVER", "MARKER", "MEMORY2")]
