"""``tfprof-collector``: serve, list, export and analyse collected GPU timelines.

Subcommands live in ``tfprof.collector.commands``; this module only builds the parser
and turns tfprof's errors (``tfprof.core.errors.TfprofError``: the collector's own and the
shared core's) into one line and their exit code. Anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from tfprof.collector.config import import_numpy_without_blas_threads
from tfprof.core.cli_parser import GuessingParser
from tfprof.core.errors import TfprofError
from tfprof.core.version import __version__

EXAMPLES = {
    "serve": "tfprof-collector serve --listen 0.0.0.0:50051 --auth-token-file /etc/tfprof/token "
    "--data-dir /var/lib/tfprof",
    "jobs": "tfprof-collector jobs --data-dir /var/lib/tfprof",
    "export": "tfprof-collector export --collector node1:4317 --job train -o train.pftrace",
    "import": "tfprof-collector import --data-dir /var/lib/tfprof --job baseline step*.json",
    "merge": "tfprof-collector merge --as jobs a.json b.json -o both.json.gz   "
    "(the same as: tfprof-collector export --as jobs a.json b.json -o both.json.gz)",
    "summary": "tfprof-collector summary tfprof-trace.json --view kernels --top 20",
    "advise": "tfprof-collector advise --data-dir /var/lib/tfprof --job train",
    "diff": "tfprof-collector diff --data-dir /var/lib/tfprof train/RUN1 train/RUN2 --top 20",
    "top": "tfprof-collector top --collector node1:4317 --once --format json",
    "sql": 'tfprof-collector sql "SELECT * FROM kernel_summary ORDER BY total_ns DESC LIMIT 10" '
    "--data-dir /var/lib/tfprof",
    "compact": "tfprof-collector compact --data-dir /var/lib/tfprof",
    "capture": "tfprof-collector capture --collector node1:4317 --job train --duration 2s "
    "-o train-window.pftrace",
    "captures": "tfprof-collector captures --collector node1:4317 --format json",
    "token": "tfprof-collector token --key-file /etc/tfprof/token.key --job resnet",
}


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written; each option's default shown unless its help says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            action.option_strings
            and default not in (None, False, argparse.SUPPRESS)
            and "default" not in text
        ):
            text += " (default: %(default)s)"
        return text


def build_parser() -> argparse.ArgumentParser:
    from tfprof.collector.commands import COMMANDS  # imports numpy: after main's first line

    parser = GuessingParser(
        prog="tfprof-collector",
        description="Collect GPU activity streamed by tfprof agents; merge, export and analyse it.",
    )
    parser.add_argument("--version", action="version", version=f"tfprof-collector {__version__}")
    parser.add_argument("--log-level", default=None, help="log level (default: INFO)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.register(sub)
    for name, command_parser in sub.choices.items():
        command_parser.formatter_class = _HelpFormatter
        command_parser.epilog = f"example:\n  {EXAMPLES[name]}"
    return parser


class _OneStyle(logging.Formatter):
    """Log lines read like every other line of ours: ``tfprof-collector: ...``, the level
    named only when it is not INFO, no logger names."""

    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
        return f"tfprof-collector: {level}{super().format(record)}"


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to ``sys.stderr`` as it is when a line is logged, not as it was when the
    handler was made: ``main`` run again in one process (tests, a notebook) under a
    replaced stderr never writes to a stream closed since."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def _setup_logging(level: str) -> None:
    logger = logging.getLogger("tfprof")
    if not logger.handlers:
        handler = _StderrHandler()
        handler.setFormatter(_OneStyle("%(message)s"))
        logger.addHandler(handler)
    logger.setLevel(getattr(logging, level.upper(), logging.INFO))


def main(argv: Sequence[str] | None = None) -> int:
    import_numpy_without_blas_threads()
    args = build_parser().parse_args(argv)
    _setup_logging(str(args.log_level or "INFO"))
    try:
        return int(args.func(args))
    except TfprofError as exc:
        print(f"tfprof-collector: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        # Ctrl-C: one line, no traceback; outputs are renamed into place only when whole.
        print("tfprof-collector: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Whoever read our output went away (`... | head`): not a failure worth a
        # traceback. Point stdout at /dev/null so the exit's flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
