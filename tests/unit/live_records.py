"""Records for live metrics: kernels and copies as rows, a stream's hello, and the union of
intervals counted the slow, obvious way."""

from __future__ import annotations

from tfprof.core.version import PROTOCOL_VERSION
from tfprof.proto import collector_pb2 as pb

T0 = 1_700_000_000 * 10**9
UUID0 = "GPU-00000000-aaaa-bbbb-cccc-000000000000"


def brute_force_union(intervals: list[tuple[int, int]]) -> int:
    """Length of the union of [start, end) intervals, the textbook way."""
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start >= reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def records(*rows: dict[str, int]) -> pb.Records:
    """Records from dicts of columns; columns a row leaves out are zero."""
    out = pb.Records()
    names = sorted({k for row in rows for k in row})
    for name in names:
        getattr(out, name).extend([row.get(name, 0) for row in rows])
    return out


def kernel(start: int, duration: int, device: int = 0, stream: int = 7) -> dict[str, int]:
    return {"kind": pb.KERNEL, "start_ns": T0 + start, "duration_ns": duration,
            "device": device, "stream": stream}  # fmt: skip


def copy(kind: int, nbytes: int, device: int = 0) -> dict[str, int]:
    return {"kind": pb.MEMCPY, "start_ns": T0, "duration_ns": 5, "device": device,
            "copy_kind": kind, "bytes": nbytes, "stream": 7}  # fmt: skip


def hello(job: str, stream_id: str = "s1", devices: list[pb.Device] | None = None) -> pb.Hello:
    return pb.Hello(protocol_version=PROTOCOL_VERSION, stream_secret=b"s" * 32, job=job,
                    run_id="run1",
                    stream_id=stream_id, host="node-a", pid=100, task="0",
                    devices=devices or [])  # fmt: skip
