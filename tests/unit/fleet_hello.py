"""The hello of one process of a fleet, named by job, host and pid (capture tests)."""

from __future__ import annotations

from tests.unit import agent_messages
from tfprof.proto import collector_pb2 as pb


def hello(job: str, host: str, pid: int) -> pb.AgentMessage:
    return agent_messages.hello(
        job, f"{job}-{host}-{pid}", run_id="r1", host=host, pid=pid, task=str(pid)
    )
