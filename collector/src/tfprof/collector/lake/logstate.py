"""What a stream's log says beyond its records, kept in the lake's ``log_state`` table.

Reading a log reports queue drops counted before a goodbye (the cumulative count each
batch carries), damaged entries (stream, offset, bytes, reason, records lost) and an
unreadable goodbye. Compaction skips damaged entries, so a reader of the lake alone
would lose all three; compaction therefore publishes them as one per-stream row, and
the lake reader applies it to the stream exactly as store/loader.py does from the log.

A stream whose log says nothing beyond its records has no row. Damage is worked out the
way the loader does (``read_log_state``: the records a damaged entry held come from the
summary cache), but only when the compactor's own scan found damage it has not
published yet, or trailing bytes no live writer is appending: an undamaged log is never
read twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from tfprof.collector.jobdata import StreamData
from tfprof.collector.lake.schema import LOG_STATE
from tfprof.collector.store.files import is_streaming
from tfprof.collector.store.stream_counts import read_log_state
from tfprof.core.batchlog import Damage


@dataclass(frozen=True)
class LogNotes:
    """One stream's ``log_state`` row."""

    dropped_queue: int = 0
    lost_records: int | None = 0  # records in the damaged entries; None: unknown
    damage: tuple[Damage, ...] = field(default_factory=tuple)
    goodbye_unreadable: bool = False

    @property
    def empty(self) -> bool:
        return self == LogNotes()

    # -- the watermark keeps the published row as JSON --------------------------------

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["damage"] = [[d.offset, d.nbytes, d.reason] for d in self.damage]
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> LogNotes:
        damage = tuple(Damage(int(o), int(n), str(r)) for o, n, r in raw.get("damage", ()))
        lost = raw.get("lost_records", 0)
        return cls(
            dropped_queue=int(raw.get("dropped_queue", 0)),
            lost_records=None if lost is None else int(lost),
            damage=damage,
            goodbye_unreadable=bool(raw.get("goodbye_unreadable", False)),
        )

    # -- the lake row -----------------------------------------------------------------

    def table(self, stream_id: str) -> pa.Table:
        row = {
            "stream_id": stream_id,
            "dropped_queue": self.dropped_queue,
            "lost_records": self.lost_records,
            "damage": [
                {"offset": d.offset, "bytes": d.nbytes, "reason": d.reason} for d in self.damage
            ],
            "goodbye_unreadable": self.goodbye_unreadable,
        }
        return pa.Table.from_pylist([row], schema=LOG_STATE.schema)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> LogNotes:
        damage = tuple(
            Damage(int(d["offset"]), int(d["bytes"]), str(d["reason"]))
            for d in row.get("damage") or ()
        )
        lost = row.get("lost_records")
        return cls(
            dropped_queue=int(row.get("dropped_queue") or 0),
            lost_records=None if lost is None and damage else int(lost or 0),
            damage=damage,
            goodbye_unreadable=bool(row.get("goodbye_unreadable")),
        )

    # -- applied to a stream read from the lake ----------------------------------------

    def apply(self, stream: StreamData) -> None:
        """What the loader notes while reading the log, in its order: the queue drops,
        the damaged ranges with the records they cost, then an unreadable goodbye."""
        stream.dropped.queue = max(stream.dropped.queue, self.dropped_queue)
        if self.damage:
            if self.lost_records is None or stream.lost_records is None:
                stream.lost_records = None
            else:
                stream.lost_records += self.lost_records
            stream.skipped += [f"batches.log: {d}" for d in self.damage]
        if self.goodbye_unreadable:
            stream.skipped.append("goodbye.pb unreadable")


def notes_of(
    directory: Path,
    dropped_queue: int,
    goodbye_unreadable: bool,
    seen: Sequence[Damage],
    trailing: Damage | None,
    published: LogNotes | None,
) -> LogNotes:
    """The row of the stream in ``directory`` now. ``seen``: damaged ranges the
    compactor's scan skipped (each followed by a good entry), ``trailing``: unreadable
    bytes at the end of the log, ``published``: the row published so far (None: none)."""
    known = published.damage if published is not None else ()
    tail = trailing is not None and not is_streaming(directory)
    if not tail and tuple(seen) == known:
        lost = published.lost_records if published is not None else 0
        return LogNotes(dropped_queue, lost, known, goodbye_unreadable)
    state = read_log_state(directory)  # exactly what the loader reports
    if not state.damage:
        return LogNotes(dropped_queue, 0, (), goodbye_unreadable)
    return LogNotes(dropped_queue, state.lost_records, tuple(state.damage), goodbye_unreadable)


def run_notes(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, str], list[str]]:
    """``jobs``' notes on each run (job, run) from its streams' ``log_state`` rows, worded
    as ``jobs`` words them from the logs: what was skipped, then the records it cost."""
    skipped: dict[tuple[str, str], list[str]] = {}
    lost: dict[tuple[str, str], int | None] = {}
    for row in sorted(rows, key=lambda r: (r["job"], r["run"], r["stream_id"])):
        run, notes = (str(row["job"]), str(row["run"])), LogNotes.from_row(row)
        lines = [f"{row['stream_id']}: batches.log {d}" for d in notes.damage]
        if notes.goodbye_unreadable:
            lines.append(f"{row['stream_id']}: goodbye.pb unreadable")
        if not lines:
            continue
        skipped.setdefault(run, []).extend(lines)
        before = lost.get(run, 0)
        cost = notes.lost_records if notes.damage else 0
        lost[run] = None if before is None or cost is None else before + cost
    out = {}
    for run, lines in skipped.items():
        total = lost[run]
        out[run] = [f"skipped {line}" for line in lines] + [
            f"records lost in skipped parts: {'unknown' if total is None else f'{total:,}'}"
        ]
    return out
