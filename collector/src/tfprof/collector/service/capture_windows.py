"""Capture windows: check a request, match it against live streams (kept: store/capture_log.py).

A capture asks every matching traced process to record GPU activity from one instant on
the collector's clock for a given duration, or for a number of whole steps (each process
opens and closes at its own step boundaries; the duration then bounds how long that
may take). The server sends each matching stream a
``CaptureWindow``; streams that say hello while a window is still open (a rank that
starts late, an agent that reconnects) get it too, so agents must ignore a capture id
they have already seen. Every capture is appended to ``captures.jsonl`` in the data dir
(fsynced before the reply), so ``tfprof-collector captures`` lists it after a restart.
Nothing here knows about gRPC.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable

from tfprof.collector.errors import InvalidArgument, NotFound
from tfprof.proto import collector_pb2 as pb

MAX_DURATION_NS = 3600 * 10**9  # an hour of every kernel of every rank is already huge
MAX_START_IN_NS = 3600 * 10**9
MAX_STEPS = 100_000


def check_request(request: pb.CaptureRequest) -> None:
    """Raise ``InvalidArgument`` unless ``request`` names what to capture and for how long."""
    if request.all and (request.jobs or request.hosts):
        raise InvalidArgument("a capture of all streams takes no job or host")
    if not (request.all or request.jobs or request.hosts):
        raise InvalidArgument("say which streams to capture: jobs, hosts, or all")
    if not 0 < request.duration_ns <= MAX_DURATION_NS:
        raise InvalidArgument(
            f"capture duration {request.duration_ns} ns: expected more than 0 and at most 1 h"
        )
    if not 0 <= request.start_in_ns <= MAX_START_IN_NS:
        raise InvalidArgument(
            f"capture start-in {request.start_in_ns} ns: expected 0 to 1 h from now"
        )
    if request.steps > MAX_STEPS or request.skip_steps > MAX_STEPS:
        raise InvalidArgument(f"capture steps {request.steps}, skip {request.skip_steps}: "
                              f"at most {MAX_STEPS:,} each")  # fmt: skip
    if request.skip_steps and not request.steps:
        raise InvalidArgument("skip-steps needs steps: say how many steps to capture")


def new_capture(request: pb.CaptureRequest, now_ns: int) -> pb.Capture:
    """A capture id and its window on the collector's clock (no streams yet)."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now_ns / 1e9))
    return pb.Capture(
        capture_id=f"cap-{stamp}-{secrets.token_hex(3)}",
        requested_ns=now_ns,
        start_ns=now_ns + request.start_in_ns,
        duration_ns=request.duration_ns,
        request=request,
    )


def window_of(capture: pb.Capture) -> pb.CaptureWindow:
    return pb.CaptureWindow(
        capture_id=capture.capture_id,
        start_ns=capture.start_ns,
        duration_ns=capture.duration_ns,
        steps=capture.request.steps,
        skip_steps=capture.request.skip_steps,
    )


def describe_targets(request: pb.CaptureRequest) -> str:
    if request.all:
        return "any stream"
    parts = []
    if request.jobs:
        parts.append("job " + ", ".join(request.jobs))
    if request.hosts:
        parts.append("host " + ", ".join(request.hosts))
    return " on ".join(parts)


def no_match(request: pb.CaptureRequest, live: int) -> NotFound:
    return NotFound(
        f"no live stream matches {describe_targets(request)} ({live} stream(s) connected): "
        "nothing was captured"
    )


def still_open(captures: Iterable[pb.Capture], now_ns: int) -> list[pb.Capture]:
    """The captures whose window has not ended at ``now_ns``."""
    return [c for c in captures if c.start_ns + c.duration_ns > now_ns]
