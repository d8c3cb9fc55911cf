"""The agent's branch of tfprof's error tree; only ``cli.main`` turns them into exit codes.

Each class carries the exit status its command returns. Imported inside user processes
(through ``config``): standard library and ``tfprof.core`` only.
"""

from __future__ import annotations

from tfprof.core.errors import InputError, TfprofError


class AgentError(TfprofError):
    """The agent could not do what it was asked (exit status 1)."""


class UsageError(AgentError, InputError):
    """Bad command line or settings, or a setup the user must change (exit status 2)."""

    exit_code = 2


class ConfigError(UsageError):
    """A ``TFPROF_*`` setting (or its flag) has a value we cannot use; the message names it."""


class CommandNotFound(UsageError):
    """The job's command does not exist (exit status 127, as a shell says)."""

    exit_code = 127


class ScriptNotFound(UsageError):
    """The job's Python interpreter was given a script that does not exist (exit status 2,
    as the interpreter says)."""


class CommandNotExecutable(UsageError):
    """The job's command exists but cannot be run (exit status 126, as a shell says)."""

    exit_code = 126
