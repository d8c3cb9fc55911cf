"""The Export call's server side: a child process writes the trace, the loop streams it.

Each export runs ``python -m tfprof.collector.service.export_child`` with the data dir:
it reads the request on stdin, writes the trace (the format and compression the
request's file name asks for) on stdout, and its outcome as one JSON object on a pipe of
its own. The loop reads stdout a chunk at a time and sends each as it comes, so the
server holds at most a chunk or two per export whatever the trace's size; a client that
reads slowly holds the child back through the pipe. Reading and merging stored records
happens in the child: its memory goes back when it exits, and the server's event loop
and ingest never wait for it. A call that ends early (the client went away) kills it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator

import grpc

from tfprof.collector.errors import CollectorError, InvalidArgument
from tfprof.proto import collector_pb2 as pb

CHILD = "tfprof.collector.service.export_child"
CHUNK_BYTES = 1 << 20
FORMATS = ("chrome", "perfetto", "xplane", "stepstats")


class ExportFailed(CollectorError):
    """The export child refused or failed; ``code`` is the status it gave its error."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def check_request(request: pb.ExportRequest) -> None:
    """What the child would refuse, refused before it is started."""
    if request.format not in FORMATS:
        raise InvalidArgument(
            f"export format {request.format!r}: expected one of {', '.join(FORMATS)}"
        )
    if request.group_by not in ("", "job", "gpu"):
        raise InvalidArgument(f"export group_by {request.group_by!r}: expected job or gpu")
    if request.capture_id and (request.window or request.since or request.until):
        raise InvalidArgument("an export of a capture keeps its window: give no other window")


def _read_all(fd: int) -> bytes:
    parts = []
    while chunk := os.read(fd, 1 << 16):
        parts.append(chunk)
    return b"".join(parts)


def outcome(raw: bytes, returncode: int) -> pb.ExportDone:
    """The child's outcome: the done message, or the error it reported (ExportFailed)."""
    try:
        result = json.loads(raw) if raw else {}
    except ValueError:
        result = {}
    if returncode == 0 and "slices" in result:
        return pb.ExportDone(slices=int(result["slices"]), path=str(result.get("path", "")))
    if "code" in result:
        code = getattr(grpc.StatusCode, str(result["code"]), grpc.StatusCode.INTERNAL)
        raise ExportFailed(code, str(result.get("message", "export failed")))
    raise ExportFailed(
        grpc.StatusCode.INTERNAL, f"the export process ended with status {returncode}"
    )


async def exported(data_dir: str, request: pb.ExportRequest) -> AsyncIterator[pb.ExportChunk]:
    """The trace ``request`` asks for, as data chunks and then one done."""
    result_read, result_write = os.pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", CHILD, data_dir, str(result_write),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            pass_fds=(result_write,),
            limit=CHUNK_BYTES,
        )  # fmt: skip
    except BaseException:
        os.close(result_read)
        raise
    finally:
        os.close(result_write)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(request.SerializeToString())
            await proc.stdin.drain()
            proc.stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the child died before reading: its status says so below
        while True:
            try:
                data = await proc.stdout.readexactly(CHUNK_BYTES)
            except asyncio.IncompleteReadError as end:
                if end.partial:
                    yield pb.ExportChunk(data=end.partial)
                break
            yield pb.ExportChunk(data=data)
        returncode = await proc.wait()
        # The child has exited: its end of the pipe is closed, so this read ends.
        done = outcome(_read_all(result_read), returncode)
        yield pb.ExportChunk(done=done)
    finally:
        if proc.returncode is None:  # the call ended first: the trace is no one's now
            proc.kill()
            await proc.wait()
        os.close(result_read)
