"""Which uid owns each job run a node daemon relays: the uid of its first process.

Run ids of scheduler jobs are public by design (a Slurm job's is derived from its job
id, which ``squeue`` shows everyone), so a run id proves nothing: a process of another
uid that names a run some uid opened on this node is refused, whatever its hello says.
The kernel tells the daemon each connection's uid (``SO_PEERCRED``). Root may join any
run when the daemon allows it (``--root-may-join``, on by default: root can read every
process's memory anyway), and says so at start.

The table lives in the daemon's spool root (``owners.json``, mode 0600), so a daemon
restarted mid-job keeps binding the job's later processes to the same uid; entries not
used for ``KEEP_S`` are forgotten.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from pathlib import Path

log = logging.getLogger("tfprof.agent.relay.run_owners")

KEEP_S = 30 * 86400.0  # a run unseen this long may be claimed again
MAX_RUNS = 100_000  # beyond, the runs unseen longest are forgotten first
FILE = "owners.json"


class RunOwners:
    def __init__(self, folder: Path | None, root_may_join: bool = True) -> None:
        """``folder``: where the table is kept (None: in memory only)."""
        self.path = folder / FILE if folder is not None else None
        self.root_may_join = root_may_join
        self._lock = threading.Lock()
        self._owners: dict[str, list[float]] = {}  # "job/run" -> [uid, last seen]
        if self.path is not None:
            self._owners = _load(self.path)

    def claim(self, job: str, run_id: str, uid: int) -> int | None:
        """None when ``uid`` may add a process to the run (the run is now its own if it
        was nobody's); else the uid that owns it."""
        key = f"{job}/{run_id}"
        now = time.time()
        with self._lock:
            entry = self._owners.get(key)
            if entry is not None and now - entry[1] > KEEP_S:
                entry = None
            if entry is None:
                self._owners[key] = [float(uid), now]
                self._trim()
                self._save()
                return None
            owner = int(entry[0])
            if owner != uid and not (uid == 0 and self.root_may_join):
                return owner
            entry[1] = now
            return None

    def _trim(self) -> None:
        if len(self._owners) <= MAX_RUNS:
            return
        oldest = sorted(self._owners, key=lambda k: self._owners[k][1])
        for key in oldest[: len(self._owners) - MAX_RUNS]:
            del self._owners[key]

    def _save(self) -> None:
        if self.path is None:
            return
        tmp = self.path.with_name(FILE + ".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(self._owners, f, separators=(",", ":"))
            os.replace(tmp, self.path)
        except OSError as exc:  # the binding still holds while this daemon runs
            log.warning("cannot save the run owners to %s: %s", self.path, exc)
            with contextlib.suppress(OSError):
                tmp.unlink()


def _load(path: Path) -> dict[str, list[float]]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("cannot read the run owners in %s (%s): starting afresh", path, exc)
        return {}
    owners: dict[str, list[float]] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(value, list) and len(value) == 2:
                with contextlib.suppress(TypeError, ValueError):
                    owners[str(key)] = [float(value[0]), float(value[1])]
    return owners
