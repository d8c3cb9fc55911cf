"""Domain errors of the collector, under tfprof's one error tree (``tfprof.core.errors``).

The gRPC layer maps them to status codes in one table (``service/servicer.py``); the CLI's
``main`` turns any ``TfprofError`` into one line and its ``exit_code``
(collector/cli.py). Exit status 2 means the user can fix the input (an argument, a
name, a file); 1 means the operation failed.
"""

from __future__ import annotations

import os

from tfprof.core.errors import InputError, TfprofError


class CollectorError(TfprofError):
    """Base class; the message is meant for the user."""


class InvalidArgument(CollectorError, InputError):
    """Malformed or out-of-range input (exit status 2)."""

    exit_code = 2


class AnalysisError(InvalidArgument):
    """A view, field, filter or window that cannot be applied; the message says why."""


class PathError(InvalidArgument):
    """A file or directory the user named cannot be opened, read, written or created."""

    @classmethod
    def from_os(cls, what: str, path: str | os.PathLike[str], exc: OSError) -> PathError:
        """The error for ``exc``, naming ``what`` and ``path`` and the OS's reason."""
        return cls(f"{what} {os.fspath(path)}: {exc.strerror or exc}")


class FailedPrecondition(CollectorError):
    """A message out of order, e.g. a batch before the hello."""


class Unsupported(CollectorError):
    """A protocol version this collector does not speak."""


class NotFound(CollectorError):
    """A job or file that does not exist (exit status 2: the name given is wrong)."""

    exit_code = 2


class Conflict(CollectorError):
    """The resource is in use, e.g. a stream another collector process holds open."""


class AlreadyExists(CollectorError):
    """A second live hello for a stream another call holds, without its secret."""


class PermissionDenied(CollectorError):
    """The caller may not do this: a stream's secret it lacks, a token's scope, a peer."""


class OutOfRange(CollectorError):
    """A value past what the protocol allows, e.g. a batch sequence that jumps."""


class Superseded(Conflict):
    """A call whose stream was resumed on a newer call (the agent reconnected)."""


class StorageUnavailable(CollectorError):
    """The data dir cannot take a write now (disk full, I/O error); the agent retries."""


class TooLarge(CollectorError):
    """A message over the configured size limit."""


class CannotListen(CollectorError):
    """The server cannot bind its address: in use, not local, or not resolvable."""


class AddressInUse(CannotListen, InvalidArgument):
    """The listen address is taken by another process: pick another (exit status 2)."""
