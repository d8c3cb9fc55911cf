"""What ``tfprof-agent run`` decides before the job starts: the command is runnable, the
job's name, a free default trace name, the tracer source (a replay trace is checked),
and the one-line notices the launcher prints.

Everything here fails as a ``UsageError`` subclass before anything is started, so a typo
never costs a training run.
"""

from __future__ import annotations

import ctypes
import os
import re
import secrets
import shutil
import sys
import time
from collections.abc import Mapping, Sequence

from tfprof.agent.inprocess.config import AgentConfig, validate_job_name
from tfprof.agent.inprocess.errors import CommandNotExecutable, CommandNotFound
from tfprof.agent.inprocess.sources.replay import check_replay_trace
from tfprof.agent.launch import bundle


def notice(message: str) -> None:
    sys.stderr.write(f"tfprof: {message}\n")
    sys.stderr.flush()


def cuda_driver_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def default_job_name(command: Sequence[str]) -> str:
    words = [w for w in command if not w.startswith("-")]
    base = os.path.basename(words[0]) if words else "job"
    if re.match(r"python[0-9.]*$", base) and len(words) > 1:
        base = os.path.basename(words[1])
    base = re.sub(r"\.py$", "", base)
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip("-._") or "job"
    # The random part keeps runs started in the same second apart (their trace files too).
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return validate_job_name(f"{base[:40]}-{stamp}-{secrets.token_hex(2)}")


def free_path(path: str) -> str:
    """``path``, or ``NAME-2.SUFFIXES``, ``NAME-3...``: the first that does not exist."""
    folder, name = os.path.split(path)
    stem, dot, suffixes = name.partition(".")
    n = 1
    while os.path.lexists(path):
        n += 1
        path = os.path.join(folder, f"{stem}-{n}{dot}{suffixes}")
    return path


def check_command(command: Sequence[str], environ: Mapping[str, str]) -> None:
    """Fail as a shell would (127, 126) before anything else is started or printed."""
    name = command[0]
    found = shutil.which(name, path=environ.get("PATH", os.defpath))
    if found is not None:
        return
    if os.sep in name and os.path.exists(name):
        raise CommandNotExecutable(f"permission denied: {name}")
    raise CommandNotFound(f"command not found: {name}")


def python_started_without_site(command: Sequence[str]) -> bool:
    if not command or not re.match(r"python[0-9.]*$", os.path.basename(command[0])):
        return False
    for arg in command[1:]:
        if arg == "--" or not arg.startswith("-") or arg in ("-c", "-m"):
            return False
        if not arg.startswith("--") and "S" in arg[1:]:
            return True
    return False


def resolve_source(cfg: AgentConfig) -> str:
    if cfg.source == f"replay:{bundle.DEMO}":
        return f"replay:{bundle.demo_trace()}"
    if cfg.source != "auto":
        if cfg.replay_path is not None:
            check_replay_trace(cfg.replay_path)
        return cfg.source
    if cuda_driver_present():
        return "cupti"
    notice("no CUDA driver found: GPU tracing is off, host metrics only (--source none)")
    return "none"
