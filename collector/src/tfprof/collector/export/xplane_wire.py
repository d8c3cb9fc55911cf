"""XPlane's wire pieces: the plane and line field tags, a plane's head, and the event and
stat metadata a plane interns as it is first used."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tfprof.collector.export.protowire import LEN, VARINT, tag, varint

SPACE_PLANE = tag(1, LEN)  # XSpace.planes
PLANE_ID, PLANE_NAME, PLANE_LINE = tag(1, VARINT), tag(2, LEN), tag(3, LEN)
LINE_ID, LINE_NAME = tag(1, VARINT), tag(2, LEN)


def string_field(field_tag: bytes, text: str) -> bytes:
    data = text.encode()
    return field_tag + varint(len(data)) + data


def plane_field(plane_id: int, name: str, body: bytes | int) -> bytes:
    """An ``XSpace.planes`` field: id and name, then ``body`` (the rest of the plane's
    fields) or, given a length, only the head of a plane whose body follows."""
    head = PLANE_ID + varint(plane_id) + string_field(PLANE_NAME, name)
    size = body if isinstance(body, int) else len(body)
    out = SPACE_PLANE + varint(len(head) + size) + head
    return out if isinstance(body, int) else out + body


@dataclass
class PlaneMetadata:
    """Builds one GPU plane: interns event and stat metadata as they are first used."""

    proto: Any
    event_ids: dict[int, int] = field(default_factory=dict)
    stat_ids: dict[str, int] = field(default_factory=dict)
    ref_ids: dict[str, int] = field(default_factory=dict)

    def stat_id(self, name: str) -> int:
        found = self.stat_ids.get(name)
        if found is None:
            found = self.stat_ids[name] = len(self.stat_ids) + len(self.ref_ids) + 1
            self.proto.stat_metadata[found].id = found
            self.proto.stat_metadata[found].name = name
        return found

    def ref_id(self, text: str) -> int:
        """A string stat value interned as stat metadata, for ``ref_value``."""
        found = self.ref_ids.get(text)
        if found is None:
            found = self.ref_ids[text] = len(self.stat_ids) + len(self.ref_ids) + 1
            self.proto.stat_metadata[found].id = found
            self.proto.stat_metadata[found].name = text
        return found

    def event_id(self, name_id: int, names: tuple[str, ...]) -> int:
        found = self.event_ids.get(name_id)
        if found is None:
            found = self.event_ids[name_id] = len(self.event_ids) + 1
            self.proto.event_metadata[found].id = found
            self.proto.event_metadata[found].name = names[name_id]
        return found
