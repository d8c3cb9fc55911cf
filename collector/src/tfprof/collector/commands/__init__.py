"""One module per ``tfprof-collector`` subcommand, each with ``register`` and ``run``."""

from __future__ import annotations

from tfprof.collector.commands import (
    advise,
    capture,
    captures,
    compact,
    diff,
    export,
    import_,
    jobs,
    merge,
    serve,
    sql,
    summary,
    token,
    top,
)

# Order here is the order in --help.
COMMANDS = (
    serve, jobs, export, import_, merge, summary, advise, diff, sql, compact, capture, captures,
    top, token,
)  # fmt: skip
