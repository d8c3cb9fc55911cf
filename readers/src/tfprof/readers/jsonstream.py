"""The events of a JSON trace a chunk at a time, without holding the whole file parsed.

``json.loads`` of a 1M-event trace takes half of an import's time and builds every
event at once (over 1 GB); readers need one event at a time. ``EventChunks`` reads the
file (gzipped or not) in blocks, cuts the ``traceEvents`` array between events and
parses each piece with msgspec, whose ``float_hook=Decimal`` gives exactly the values
``json.loads(..., parse_float=Decimal)`` gives. It never guesses:

- a cut is made only after a ``}`` followed by ``,`` and ``{``; a piece is parsed as
  ``[piece]``, which fails unless the cut fell between two events of the array (a cut
  inside a string leaves the string open, one inside an event leaves it unclosed);
- the keys before ``traceEvents`` are checked the same way (parsed as an object with
  ``traceEvents`` put back), the end of the array and the keys after it by the standard
  library's ``raw_decode`` of the last piece;
- when msgspec is not installed, or anything is not as expected (a piece that does not
  parse, non-standard JSON such as NaN, a second ``traceEvents``), it raises
  ``NotStreamable`` and the caller reads the file the standard library's way, whose
  messages for broken files it keeps.
"""

from __future__ import annotations

import gc
import gzip
import json
import os
import re
import zlib
from collections.abc import Callable, Iterator
from decimal import Decimal
from itertools import repeat
from typing import Any, Protocol

from tfprof.readers.trace import Event, NotStreamable

BLOCK_BYTES = 1 << 20  # a piece parsed at once: big enough for speed, small for memory
_GZIP_MAGIC = b"\x1f\x8b"
_WS = rb"[ \t\n\r]*"
_TRACE_EVENTS = re.compile(rb'"traceEvents"' + _WS + rb":" + _WS + rb"\[")
_BETWEEN_EVENTS = re.compile(rb"\}" + _WS + rb"," + _WS + rb"\{")
_HEAD_LIMIT = 64 << 20  # keys before traceEvents larger than this: not worth streaming


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def _decoder() -> Callable[[bytes | memoryview], Any]:
    try:
        import msgspec
    except ImportError:
        raise NotStreamable("msgspec is not installed") from None
    decode: Callable[[bytes | memoryview], Any] = msgspec.json.Decoder(float_hook=Decimal).decode
    return decode


class EventChunks:
    """Iterate over lists of events (dicts only, as ``read_json_trace`` keeps); ``meta``
    (the top-level object without ``traceEvents``) is complete once iteration ends.

    Raises ``NotStreamable`` (at the start or during iteration) when the file must be
    read whole; ``OSError`` when it cannot be read.
    """

    def __init__(self, path: str | os.PathLike[str], block_bytes: int = BLOCK_BYTES) -> None:
        self.path = os.fspath(path)
        self.meta: dict[str, Any] = {}
        self.events = 0  # events met so far, dicts or not
        self._block = block_bytes
        self._decode = _decoder()

    def head(self) -> dict[str, Any]:
        """Only the keys before ``traceEvents`` (reads the file's first blocks)."""
        with open(self.path, "rb") as raw:
            gzipped = raw.read(2) == _GZIP_MAGIC
            raw.seek(0)
            try:
                if gzipped:
                    with gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
                        self._read_head(unzipped)
                else:
                    self._read_head(raw)
            except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
                raise NotStreamable(f"unreadable: {exc}") from None
        return self.meta

    def __iter__(self) -> Iterator[list[Event]]:
        with open(self.path, "rb") as raw:
            gzipped = raw.read(2) == _GZIP_MAGIC
            raw.seek(0)
            if gzipped:
                with gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
                    yield from self._chunks(unzipped)
            else:
                yield from self._chunks(raw)

    def _chunks(self, f: _Readable) -> Iterator[list[Event]]:
        # ``buf`` holds the unread part of the array, after one byte that may be
        # overwritten: the array's ``[`` or a byte between two events. Each piece is
        # parsed in place (that byte made ``[``, the one after its last event ``]``), not
        # copied: a 200 MB file would be copied several times over otherwise.
        try:
            buf, eof = self._read_head(f)
            want = 2 * self._block
            while True:
                while len(buf) < want and not eof:
                    block = f.read(self._block)
                    eof = not block
                    buf += block
                cut = _BETWEEN_EVENTS.search(buf, self._block) if len(buf) > self._block else None
                if cut is None:
                    if eof:
                        break
                    want = len(buf) + self._block  # one huge event: read on
                    continue
                events = self._parse(buf, cut.start() + 1)
                if events is None:  # not a cut between events: the rest is read exactly
                    buf += f.read()
                    break
                del buf[: cut.end() - 2]  # keep the byte before the next event's "{"
                want = 2 * self._block
                yield self._keep(events)
            yield self._keep(self._tail(buf))
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise NotStreamable(f"unreadable: {exc}") from None

    def _read_head(self, f: _Readable) -> tuple[bytearray, bool]:
        """Read up to the ``traceEvents`` array's ``[``; the keys before it into meta."""
        buf = b""
        while True:
            block = f.read(self._block)
            buf += block
            body = buf.lstrip(b" \t\n\r")
            if body[:1] == b"[":  # Chrome's bare-array form
                self._bare = True
                return bytearray(body), not block
            self._bare = False
            if body[:1] != b"{":
                raise NotStreamable("not a JSON object or array")
            found = _TRACE_EVENTS.search(body)
            if found:
                head = self._parse_object(body[: found.start()] + b'"traceEvents":0}')
                head.pop("traceEvents")
                self.meta.update(head)
                return bytearray(body[found.end() - 1 :]), not block
            if not block or len(buf) > _HEAD_LIMIT:
                raise NotStreamable("no traceEvents array near the start")

    def _parse(self, buf: bytearray, end: int) -> list[Any] | None:
        """The events in ``buf[1:end]`` (``buf[end - 1]`` closes the last one), or None
        when that is not a list of whole events; ``buf`` is left as it was."""
        after = buf[end]
        buf[0], buf[end] = 0x5B, 0x5D  # "[", "]"
        # A piece is thousands of acyclic dicts that live until the reader is done with
        # them: collecting cycles while they are made only walks them, for nothing.
        # msgspec holds the GIL, so no other thread runs meanwhile.
        collecting = gc.isenabled()
        gc.disable()
        try:
            with memoryview(buf) as view, view[: end + 1] as piece:
                events = self._decode(piece)
        except Exception:  # msgspec.DecodeError, or a value it will not decode
            buf[end] = after
            return None
        finally:
            if collecting:
                gc.enable()
        return events if isinstance(events, list) else None

    def _parse_object(self, text: bytes) -> dict[str, Any]:
        try:
            value = self._decode(text)
        except Exception:
            raise NotStreamable("keys before traceEvents are not plain JSON") from None
        if not isinstance(value, dict):
            raise NotStreamable("not a JSON object")
        return value

    def _tail(self, buf: bytearray) -> list[Any]:
        """The last events, the array's end and the keys after it, parsed exactly."""
        buf[0] = 0x5B  # "["
        try:
            text = buf.decode("utf-8")
            events, end = json.JSONDecoder(parse_float=Decimal).raw_decode(text)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise NotStreamable("the end of traceEvents is not plain JSON") from None
        rest = text[end:].strip()
        if self._bare:
            if rest:
                raise NotStreamable("text after the events")
            return list(events)
        if rest.startswith(","):
            try:
                after = json.loads("{" + rest[1:], parse_float=Decimal)
            except json.JSONDecodeError:
                raise NotStreamable("the keys after traceEvents are not plain JSON") from None
            if "traceEvents" in after:
                raise NotStreamable("a second traceEvents")
            self.meta.update(after)
        elif rest != "}":
            raise NotStreamable("text after the trace object")
        return list(events)

    def _keep(self, events: list[Any]) -> list[Event]:
        self.events += len(events)
        if all(map(isinstance, events, repeat(dict))):
            return events
        return [e for e in events if isinstance(e, dict)]
