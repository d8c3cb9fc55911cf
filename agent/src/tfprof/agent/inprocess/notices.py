"""The hook's one-line notices on stderr: each message once per process, never raising."""

from __future__ import annotations

import sys
import threading

_warned: set[str] = set()
_warn_lock = threading.Lock()


def warn(message: str) -> None:
    """One line on stderr, once per message per process."""
    with _warn_lock:
        if message in _warned:
            return
        _warned.add(message)
    try:
        sys.stderr.write(f"tfprof: {message}\n")
        sys.stderr.flush()
    except Exception:
        pass


def reset_after_fork() -> None:
    """A forked child gets a fresh lock: another thread may have held it at fork time."""
    global _warn_lock
    _warn_lock = threading.Lock()
