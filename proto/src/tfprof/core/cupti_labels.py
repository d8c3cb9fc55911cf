"""CUPTI enum values and their labels, in both directions, for every part that shows or reads them.

Values are CUPTI's (``CUpti_ActivityMemcpyKind``, ``CUpti_ActivityMemoryKind``,
``CUpti_ActivitySynchronizationType``, ``CUpti_ActivityMemoryOperationType``) or ours
(the ``category`` of API records); labels are what our exports write. ``parse`` also
accepts the spellings other tools write (Kineto's ``"event sync"``, ``"Device Static"``,
``"HtoD"`` in any case), because the trace readers meet them in recorded files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

PEER_COPY = 10  # CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: the only copy kind with a destination device


def _key(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


@dataclass(frozen=True)
class Labels:
    """One CUPTI enum: ``label(value)`` for writers, ``parse(text)`` for readers."""

    names: Mapping[int, str]
    fallback: str  # the label of 0 and of any value CUPTI may add later
    aliases: Mapping[str, int] = field(default_factory=dict)

    def label(self, value: int) -> str:
        return self.names.get(value, self.fallback)

    def parse(self, text: str) -> int:
        """The value of a label (any case, spaces or underscores ignored); 0 when unknown."""
        key = _key(text)
        for value, name in self.names.items():
            if _key(name) == key:
                return value
        return self.aliases.get(key, 0)

    @property
    def max_value(self) -> int:
        return max(self.names)


COPY_KINDS = Labels(
    names={
        0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA",
        6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP",
    },
    fallback="Unknown",
)  # fmt: skip

MEMORY_KINDS = Labels(
    names={
        0: "unknown", 1: "pageable", 2: "pinned", 3: "device", 4: "array",
        5: "managed", 6: "device_static", 7: "managed_static",
    },
    fallback="unknown",
)  # fmt: skip

SYNC_TYPES = Labels(
    names={
        0: "Unknown", 1: "EventSynchronize", 2: "StreamWaitEvent",
        3: "StreamSynchronize", 4: "ContextSynchronize",
    },
    fallback="Unknown",
    # Kineto's cuda_sync "name"/"cuda_sync_kind" spellings.
    aliases={"eventsync": 1, "streamwaitevent": 2, "streamsync": 3, "contextsync": 4},
)  # fmt: skip

# The ``category`` of an API record: which CUDA API the call belongs to.
API_RUNTIME = 1
API_DRIVER = 2
API_CATEGORIES = Labels(
    names={0: "unknown", API_RUNTIME: "cuda_runtime", API_DRIVER: "cuda_driver"},
    fallback="unknown",
    # Kineto's and Nsight's spellings.
    aliases={"runtime": API_RUNTIME, "driver": API_DRIVER, "cudaapi": API_RUNTIME},
)  # fmt: skip

MEMORY_OPS = Labels(
    names={0: "unknown", 1: "allocation", 2: "release"},
    fallback="unknown",
    aliases={"alloc": 1, "malloc": 1, "free": 2},
)  # fmt: skip
