"""The process that writes one Export call's trace (service/export_stream.py starts it).

``python -m tfprof.collector.service.export_child DATA_DIR RESULT_FD``: the
``ExportRequest`` on stdin, the trace's bytes on stdout, and on ``RESULT_FD`` one JSON
object: ``{"slices": N, "path": P}``, or ``{"code": STATUS, "message": M}`` for an error
of ours (the status ``status_for`` gives it, as any call's error gets). Anything else
the export prints goes to stderr (the collector's log), never into the trace.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import BinaryIO, Literal

from tfprof.collector.config import import_numpy_without_blas_threads
from tfprof.proto import collector_pb2 as pb


def export_to(data_dir: str, request: pb.ExportRequest, out: BinaryIO) -> pb.ExportDone:
    """Write the trace ``request`` asks for of ``data_dir``'s jobs into ``out``."""
    from tfprof.collector.export import gzip_name_of, make_reporter, render_to
    from tfprof.collector.export.selection import stored_jobs, time_window
    from tfprof.collector.merged.streamed import streamed

    names = list(request.jobs) or None
    jobs, capture_window = stored_jobs([data_dir], names, request.capture_id or None)
    window = time_window(
        jobs, capture_window or request.window or None, request.since or None,
        request.until or None,
    )  # fmt: skip
    group_by: Literal["job", "gpu"] = "gpu" if request.group_by == "gpu" else "job"
    timeline = streamed(jobs, group_by, window)
    name = request.file_name
    reporter = make_reporter(timeline, name, request.format)
    path = ""
    if request.format == "xplane" and not name.lower().endswith(".xplane.pb"):
        from tfprof.collector.export.xplane import XPlaneReporter

        assert isinstance(reporter, XPlaneReporter)
        path = reporter.output_file(Path("")).as_posix()  # inside the client's log dir
    render_to(reporter, out, gzip_name_of(name))
    return pb.ExportDone(slices=timeline.num_slices, path=path)


def main(argv: list[str]) -> int:
    from tfprof.collector.service.servicer import status_for
    from tfprof.core.errors import TfprofError

    data_dir, result_fd = argv[1], int(argv[2])
    import_numpy_without_blas_threads()
    request = pb.ExportRequest.FromString(sys.stdin.buffer.read())
    out = os.fdopen(os.dup(1), "wb", buffering=1 << 20)
    os.dup2(2, 1)  # a stray print lands in the log, not in the trace
    with os.fdopen(result_fd, "w") as result:
        try:
            with out:
                done = export_to(data_dir, request, out)
        except TfprofError as exc:
            json.dump({"code": status_for(exc).name, "message": str(exc)}, result)
            return 1
        except BrokenPipeError:  # the collector stopped reading: the call is gone
            return 1
        json.dump({"slices": done.slices, "path": done.path}, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
