"""Domain errors of the collector. The gRPC layer maps them to status codes in one place
(collector/server.py); the CLI maps them to exit codes (collector/cli.py)."""


class CollectorError(Exception):
    """Base class; the message is meant for the user."""


class InvalidArgument(CollectorError):
    """Malformed or out-of-range input."""


class FailedPrecondition(CollectorError):
    """A message out of order, e.g. a batch before the hello."""


class Unsupported(CollectorError):
    """A protocol version this collector does not speak."""


class NotFound(CollectorError):
    """A job or file that does not exist."""


class Conflict(CollectorError):
    """The resource is in use, e.g. a stream another collector process holds open."""


class StorageUnavailable(CollectorError):
    """The data dir cannot take a write now (disk full, I/O error); the agent retries."""


class TooLarge(CollectorError):
    """A message over the configured size limit."""
