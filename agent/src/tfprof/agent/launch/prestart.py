"""What ``tfprof-agent run`` decides before the job starts: the command is runnable (and,
for a Python interpreter, its script exists), the job's name, a free default trace name,
the tracer source (a replay trace is checked), and the one-line notices the launcher
prints.

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
from tfprof.agent.inprocess.errors import CommandNotExecutable, CommandNotFound, ScriptNotFound
from tfprof.agent.inprocess.sources.replay_trace import check_replay_trace
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


# CPython's options that take a value: ``-W arg``, ``-X opt``, ``--check-hash-based-pycs m``.
_VALUE_OPTIONS = frozenset("WX")
_LONG_VALUE_OPTIONS = frozenset({"--check-hash-based-pycs"})
_PYTHON = re.compile(r"python[0-9.]*$")


def python_script(command: Sequence[str]) -> str | None:
    """The script a Python interpreter command runs (``python3 -u train.py`` ->
    ``train.py``); None when it is not an interpreter or runs no file (``-c``, ``-m``,
    ``-`` for stdin, ``--help``, an interactive prompt)."""
    if not command or not _PYTHON.match(os.path.basename(command[0])):
        return None
    args = iter(command[1:])
    for arg in args:
        if arg == "--":
            return next(args, None)
        if arg == "-" or not arg.startswith("-"):
            return None if arg == "-" else arg
        if arg.startswith("--"):
            name = arg.partition("=")[0]
            if name in _LONG_VALUE_OPTIONS and "=" not in arg:
                next(args, None)
            elif name in ("--help", "--version", "--help-env", "--help-xoptions", "--help-all"):
                return None
            continue
        for i, letter in enumerate(arg[1:], start=1):  # a cluster: -uB, -Werror, -c CODE
            if letter in "cmhV?":  # code, a module, or help: no file
                return None
            if letter in _VALUE_OPTIONS:
                if i == len(arg) - 1:
                    next(args, None)  # its value is the next argument
                break
    return None


def check_script(command: Sequence[str]) -> None:
    """Fail as the interpreter would (status 2), but before anything is started, when a
    Python command's script does not exist: nothing to trace, nothing to write."""
    script = python_script(command)
    if script is not None and not os.path.exists(script):
        name = os.path.basename(command[0])
        raise ScriptNotFound(
            f"{name}: can't open file {script!r}: no such file (nothing was started)"
        )


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
