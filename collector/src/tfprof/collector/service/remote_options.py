"""The options of client commands (``capture``, ``captures``, ``top``, ``export
--collector``) that reach a running collector; ``remote.open_remote`` opens the channel
they name. Apart from ``remote`` so that building the CLI's parser imports no gRPC.

The token is read from a file (``--auth-token-file``), never from the command line,
where other users of the host could read it.
"""

from __future__ import annotations

import argparse

from tfprof.collector.config import DEFAULT_COLLECTOR


def add_client_options(p: argparse.ArgumentParser, collector_help: str | None = None) -> None:
    """How to reach a running collector: its gRPC address (what `serve --listen` binds,
    the address agents stream to), its token, its CA."""
    p.add_argument(
        "--collector",
        metavar="HOST:PORT",
        default=None,
        help=collector_help
        or f"the running collector's gRPC address (default: {DEFAULT_COLLECTOR})",
    )
    p.add_argument(
        "--auth-token-file",
        metavar="FILE",
        default=None,
        help="file holding the collector's bearer token (default: "
        "TFPROF_COLLECTOR_AUTH_TOKEN_FILE, else none)",
    )
    p.add_argument(
        "--tls-ca", metavar="PEM", default="", help="talk TLS, trusting this CA (default: none)"
    )
