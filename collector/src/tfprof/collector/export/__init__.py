"""Timeline reporters: one per output format, chosen by name or by the output's suffix.

A reporter is built from a ``Timeline`` (``merged.streamed``), which it renders a
part (time chunk) at a time, and has one method, ``render(outfile)``, that writes the
whole output to a binary file object (memray's reporter shape).
``write_timeline`` picks the reporter, opens the file (gzip for ``.gz``) and renders.

| format    | suffix                 | what opens it                                         |
|-----------|------------------------|-------------------------------------------------------|
| chrome    | .json, .json.gz        | ui.perfetto.dev, chrome://tracing                     |
| perfetto  | .pftrace               | ui.perfetto.dev, trace_processor (large traces)       |
| xplane    | a directory, .xplane.pb| TensorBoard's profile plugin, XProf                   |
| stepstats | .pb, .pbtxt            | tensorflow.python.client.timeline.Timeline            |

The protobuf formats import their classes only when used.
"""

from __future__ import annotations

import gzip
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from tfprof.collector.errors import InvalidArgument
from tfprof.collector.export.chrome import ChromeReporter
from tfprof.collector.export.output import BinaryOutput
from tfprof.collector.timeline.model import Timeline

if TYPE_CHECKING:
    from tfprof.collector.export.chrome_stacks import ChromeStacks

# About level 1's speed for fewer bytes; 4 and up save some more bytes for more time
# (bench/results/cpu-design-choices.txt, "gzip").
GZIP_LEVEL = 3
# chrome://tracing cannot load JSON past ~256 MiB (V8's string limit) and the Perfetto
# UI slows to a crawl well before; Perfetto's protobuf format has no such limit.
CHROME_JSON_WARN_BYTES = 250 * 1000 * 1000

log = logging.getLogger("tfprof.collector.export")


class Reporter(Protocol):
    def render(self, outfile: BinaryOutput) -> None: ...


ReporterFactory = Callable[..., Reporter]


def _perfetto(timeline: Timeline, **options: Any) -> Reporter:
    from tfprof.collector.export.perfetto import PerfettoReporter

    return PerfettoReporter(timeline, **options)


def _xplane(timeline: Timeline, **options: Any) -> Reporter:
    from tfprof.collector.export.xplane import XPlaneReporter

    return XPlaneReporter(timeline, **options)


def _stepstats(timeline: Timeline, **options: Any) -> Reporter:
    from tfprof.collector.export.stepstats import StepStatsReporter

    return StepStatsReporter(timeline, **options)


FORMATS: dict[str, ReporterFactory] = {
    "chrome": ChromeReporter,
    "perfetto": _perfetto,
    "xplane": _xplane,
    "stepstats": _stepstats,
}
# Longest first: ".json.gz" must win over ".gz", ".xplane.pb" over ".pb".
SUFFIXES: tuple[tuple[str, str], ...] = (
    (".json.gz", "chrome"),
    (".json", "chrome"),
    (".pftrace", "perfetto"),
    (".perfetto-trace", "perfetto"),
    (".xplane.pb", "xplane"),
    (".pbtxt", "stepstats"),
    (".pb", "stepstats"),
)


class UnknownFormatError(InvalidArgument):
    """No reporter for the requested format or output name; the message lists them."""


def _known() -> str:
    suffixes = ", ".join(s for s, _ in SUFFIXES)
    return f"formats: {', '.join(sorted(FORMATS))}; suffixes: {suffixes}"


def format_for(path: str | os.PathLike[str], fmt: str | None = None) -> str:
    """The format name: ``fmt`` when given, else the one ``path``'s suffix implies."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise UnknownFormatError(f"unknown output format {fmt!r} (known {_known()})")
        return fmt
    name = os.fspath(path).lower()
    for suffix, found in SUFFIXES:
        if name.endswith(suffix):
            return found
    if name.endswith(("/", os.sep)) or Path(path).is_dir():
        return "xplane"  # a TensorBoard log dir
    raise UnknownFormatError(
        f"cannot tell the output format of {os.fspath(path)!r} from its name; "
        f"name it with a known suffix or pass a format (known {_known()}; "
        "a directory means xplane)"
    )


def reporter_for(path: str | os.PathLike[str], fmt: str | None = None) -> ReporterFactory:
    """The reporter class for ``fmt``, or for ``path``'s suffix when ``fmt`` is None."""
    return FORMATS[format_for(path, fmt)]


def make_reporter(timeline: Timeline, name: str, fmt: str) -> Reporter:
    """The reporter of format ``fmt`` for an output called ``name`` (``.pbtxt``: text)."""
    options: dict[str, Any] = {}
    if fmt == "stepstats":
        options["text"] = name.lower().endswith(".pbtxt")
    return FORMATS[fmt](timeline, **options)


def render_to(
    reporter: Reporter,
    raw: IO[bytes],
    gzip_name: str | None = None,
    progress: Callable[[int], None] | None = None,
    after: Callable[[BinaryOutput], None] | None = None,
) -> int:
    """Render into ``raw``, gzip-compressed when ``gzip_name`` (the name inside the gzip
    stream) is given; returns the bytes the reporter wrote, before compression. ``after``
    writes more once the reporter is done (Perfetto's appended stack samples)."""
    counted = _Counting(raw, progress)
    if gzip_name is None:
        reporter.render(counted)
        if after is not None:
            after(counted)
        return counted.written
    with gzip.GzipFile(
        filename=gzip_name, mode="wb", fileobj=raw, compresslevel=GZIP_LEVEL, mtime=0
    ) as zipped:
        counted = _Counting(zipped, progress)
        reporter.render(counted)
        if after is not None:
            after(counted)
    return counted.written


def gzip_name_of(file_name: str) -> str | None:
    """The name inside the gzip stream of an output called ``file_name``; None when it
    is not to be compressed (no ``.gz`` suffix)."""
    return file_name[:-3] if file_name.lower().endswith(".gz") else None


def write_timeline(
    timeline: Timeline,
    path: str | os.PathLike[str],
    fmt: str | None = None,
    progress: Callable[[int], None] | None = None,
    after: Callable[[BinaryOutput], None] | None = None,
    chrome_stacks: ChromeStacks | None = None,
) -> Path:
    """Render ``timeline`` to ``path`` (gzip-compressed when it ends in ``.gz``).

    Returns the file written: ``path`` itself, or for xplane the ``.xplane.pb`` file
    inside the log dir ``path``. The output appears whole or not at all: it is written
    next to its final name and renamed into place, so a reader never sees half a trace,
    and an error or Ctrl-C leaves nothing behind. ``progress`` is told every (uncompressed)
    byte count the reporter writes; ``after`` as ``render_to`` has it; ``chrome_stacks``:
    Python stacks for a Chrome JSON output (export/chrome_stacks.py).
    """
    name = format_for(path, fmt)
    reporter = make_reporter(timeline, os.fspath(path), name)
    if chrome_stacks is not None and isinstance(reporter, ChromeReporter):
        reporter.stacks = chrome_stacks
    target = Path(path)
    if name == "xplane":
        from tfprof.collector.export.xplane import XPlaneReporter

        assert isinstance(reporter, XPlaneReporter)
        target = reporter.output_file(target)  # a log dir: the file TensorBoard looks for
        target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        with open(partial, "wb") as raw:
            written = render_to(reporter, raw, gzip_name_of(target.name), progress, after)
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    if name == "chrome" and written > CHROME_JSON_WARN_BYTES:
        log.warning(
            "%s holds %.0f MB of JSON: chrome://tracing cannot open JSON over ~256 MB and "
            "the Perfetto UI slows down; export with --format perfetto (a .pftrace file)",
            target,
            written / 1e6,
        )
    return target


class _Counting:
    """Counts the (uncompressed) bytes a reporter writes."""

    def __init__(self, out: BinaryOutput, progress: Callable[[int], None] | None) -> None:
        self.out = out
        self.written = 0
        self._progress = progress

    def write(self, data: bytes | memoryview, /) -> Any:
        self.written += len(data)
        if self._progress is not None:
            self._progress(len(data))
        return self.out.write(data)


__all__ = [
    "CHROME_JSON_WARN_BYTES",
    "FORMATS",
    "SUFFIXES",
    "BinaryOutput",
    "ChromeReporter",
    "Reporter",
    "ReporterFactory",
    "UnknownFormatError",
    "format_for",
    "gzip_name_of",
    "make_reporter",
    "render_to",
    "reporter_for",
    "write_timeline",
]
