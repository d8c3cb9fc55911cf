"""The root of tfprof's error tree, shared by the agent and the collector.

Every error a user should see as one line derives from ``TfprofError`` and carries the exit
status its command returns; each side's ``main`` is the only place that turns one into a
line and an exit code. Anything else that escapes is a bug and keeps its traceback.
"""

from __future__ import annotations


class TfprofError(Exception):
    """An error tfprof reports as one line; ``exit_code`` is what the command returns."""

    exit_code: int = 1


class InputError(TfprofError):
    """Bad input the user can fix: a file, a name, an option value (exit status 2)."""

    exit_code = 2


class TraceFormatError(InputError):
    """A file is not a trace tfprof can read; the message is one line naming the file."""


class FormatUnavailable(InputError):
    """A format needs a package that is not installed; the message says what to pip install."""
