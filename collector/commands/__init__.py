"""One module per ``tfprof-collector`` subcommand, each with ``register`` and ``run``."""

from __future__ import annotations

from tfprof.collector.commands import export, jobs, serve

# Order here is the order in --help.
COMMANDS = (serve, jobs, export)
