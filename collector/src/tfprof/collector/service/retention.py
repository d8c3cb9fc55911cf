"""Retention: which stored job runs to delete under ``--retain-days``/``--retain-bytes``.

Rules (``plan`` is pure; ``enforce`` applies it to a store):

- a run that is streaming (a live collector holds one of its streams open) is never
  deleted;
- ``retain_days``: any other run whose newest file is older than that is deleted, finished
  or incomplete (an incomplete run idle that long is abandoned);
- ``retain_bytes``: while the store is over the limit, finished runs are deleted oldest
  first (by newest write). Incomplete runs are not deleted for space: an agent may still
  replay its spool into them. When only such runs remain over the limit, we say so.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from tfprof.collector.errors import Conflict
from tfprof.collector.store import Store
from tfprof.collector.store.catalog import FINISHED, STREAMING, JobInfo

log = logging.getLogger("tfprof.collector.service.retention")

DAY_S = 86_400.0


@dataclass(frozen=True)
class Policy:
    retain_days: float = 0.0  # 0 = keep forever
    retain_bytes: int = 0  # 0 = no limit

    @property
    def active(self) -> bool:
        return self.retain_days > 0 or self.retain_bytes > 0


@dataclass(frozen=True)
class Deletion:
    run: JobInfo
    reason: str


def plan(runs: list[JobInfo], policy: Policy, now: float) -> tuple[list[Deletion], int]:
    """The runs to delete, oldest first, and the bytes that would remain."""
    remaining = sum(r.bytes for r in runs)
    candidates = sorted((r for r in runs if r.state != STREAMING), key=lambda r: r.last_write)
    doomed: list[Deletion] = []
    if policy.retain_days > 0:
        cutoff = now - policy.retain_days * DAY_S
        for r in candidates:
            if r.last_write < cutoff:
                idle = (now - r.last_write) / DAY_S
                doomed.append(Deletion(r, f"{r.state}, idle {idle:.1f} days"))
                remaining -= r.bytes
    if policy.retain_bytes > 0:
        gone = {id(d.run) for d in doomed}
        for r in candidates:
            if remaining <= policy.retain_bytes:
                break
            if r.state == FINISHED and id(r) not in gone:
                doomed.append(Deletion(r, f"store over {policy.retain_bytes} bytes"))
                remaining -= r.bytes
    return doomed, remaining


def enforce(store: Store, policy: Policy, now: float | None = None) -> list[Deletion]:
    """Delete what ``plan`` says and log each deletion; returns what was deleted."""
    if not policy.active:
        return []
    doomed, remaining = plan(store.list_jobs(), policy, time.time() if now is None else now)
    deleted = []
    for d in doomed:
        try:
            freed = store.delete_run(d.run.name, d.run.run_id)
        except Conflict:
            continue  # it started streaming again since we looked
        log.info(
            "retention: deleted job %s run %s (%s): %d records, %d bytes freed",
            d.run.name,
            d.run.run_id,
            d.reason,
            d.run.records,
            freed,
        )
        deleted.append(d)
    if policy.retain_bytes and remaining > policy.retain_bytes:
        log.warning(
            "retention: %d bytes stored, over --retain-bytes %d, but the rest is streaming "
            "or incomplete runs, which retention never deletes for space",
            remaining,
            policy.retain_bytes,
        )
    return deleted
