"""``tfprof-collector``: serve, list, export and analyse collected GPU timelines.

Subcommands live in ``tfprof.collector.commands``; this module only builds the parser
and turns domain errors into exit codes.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from tfprof.collector.commands import COMMANDS
from tfprof.collector.errors import CollectorError, InvalidArgument, NotFound
from tfprof.core.version import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfprof-collector",
        description="Collect GPU activity streamed by tfprof agents; merge, export and analyse it.",
    )
    parser.add_argument("--version", action="version", version=f"tfprof-collector {__version__}")
    parser.add_argument("--log-level", default=None, help="log level (default: INFO)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


def _setup_logging(level: str) -> None:
    logger = logging.getLogger("tfprof")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(getattr(logging, level.upper(), logging.INFO))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(str(args.log_level or "INFO"))
    try:
        return int(args.func(args))
    except NotFound as exc:
        print(f"tfprof-collector: {exc}", file=sys.stderr)
        return 1
    except (InvalidArgument, ValueError) as exc:
        print(f"tfprof-collector: {exc}", file=sys.stderr)
        return 2
    except (CollectorError, OSError) as exc:
        print(f"tfprof-collector: {exc}", file=sys.stderr)
        return 1


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
