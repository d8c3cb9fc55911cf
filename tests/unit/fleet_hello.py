"""The hello of one process of a fleet, named by job, host and pid (capture tests)."""

from __future__ import annotations

from tfprof.core.version import PROTOCOL_VERSION
from tfprof.proto import collector_pb2 as pb


def hello(job: str, host: str, pid: int) -> pb.AgentMessage:
    stream_id = f"{job}-{host}-{pid}"
    return pb.AgentMessage(
        hello=pb.Hello(
            protocol_version=PROTOCOL_VERSION,
            stream_secret=b"s" * 32,
            job=job,
            run_id="r1",
            stream_id=stream_id,
            host=host,
            pid=pid,
            task=str(pid),
        )
    )
