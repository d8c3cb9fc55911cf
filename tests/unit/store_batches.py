"""Hellos and batches written straight to a Store, no gRPC in between."""

from __future__ import annotations

from typing import Any

from tfprof.core.records import COLUMNS
from tfprof.core.version import PROTOCOL_VERSION
from tfprof.proto import collector_pb2 as pb


def hello(job: str = "train", run_id: str = "run1", stream_id: str = "s1", **kw: Any) -> pb.Hello:
    """A valid Hello; ``kw`` overrides or adds fields (each of its own proto type)."""
    fields: dict[str, Any] = {"protocol_version": PROTOCOL_VERSION, "stream_secret": b"s" * 32,
    "job": job, "run_id": run_id,
                                 "stream_id": stream_id, "host": "node-a", "pid": 4242,
                                 "task": "0", "argv": ["python", "train.py"],
                                 "source": "replay:x.json"}  # fmt: skip
    fields.update(kw)
    return pb.Hello(**fields)


def batch(seq: int, starts: list[int], name: int = 1, strings: list[str] | None = None,
          string_base: int = 1, dropped: int = 0) -> pb.Batch:  # fmt: skip
    b = pb.Batch(seq=seq, string_base=string_base, dropped=dropped)
    b.strings.extend(strings or [])
    r = b.records
    n = len(starts)
    r.kind.extend([pb.KERNEL] * n)
    r.start_ns.extend(starts)
    r.duration_ns.extend([100] * n)
    r.name.extend([name] * n)
    r.stream.extend([7] * n)
    for col in COLUMNS:
        if len(getattr(r, col)) == 0:
            getattr(r, col).extend([0] * n)
    return b
