"""``tfprof-agent``: run a command under the tracer.

Flags are sugar over ``TFPROF_*`` environment variables (see ``config.OPTIONS``): each
flag's value is laid over the environment as its variable (``config.with_flags``), and
the launcher and the job read the same configuration from that.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import textwrap
from collections.abc import Sequence

from tfprof.agent import config
from tfprof.core.errors import TfprofError
from tfprof.core.version import __version__

# Options that have a flag; flag --replay-speed sets OPTIONS["replay_speed"], and so on.
FLAGGED_OPTIONS = (
    "collector",
    "job",
    "output",
    "source",
    "replay_speed",
    "replay_repeat",
    "host_metrics_interval",
    "exit_timeout",
    "tls_ca",
    "spool_dir",
    "tf_ops",
)


# What a default looks like when the option's own default is empty.
EMPTY_DEFAULTS = {
    "collector": "none: an embedded collector writes the trace",
    "job": "the command's name, a timestamp and a random suffix",
    "output": "tfprof-JOB.trace.json.gz in the current directory",
    "tls_ca": "none: plaintext gRPC",
}


def _help(key: str) -> str:
    opt = config.OPTIONS[key]
    default = opt.default or EMPTY_DEFAULTS.get(key, "")
    shown = f" (default: {default})" if default else ""
    return f"{opt.doc}{shown} [env {opt.env}]".replace("%", "%%")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfprof-agent",
        description="Profile the GPU activity of an unmodified job: kernels, copies and "
        "memsets of every Python process, streamed to a tfprof collector.",
        epilog="example: tfprof-agent run -- python train.py   (tfprof-agent COMMAND --help "
        "for each command)",
    )
    parser.add_argument(
        "--version", action="version", version=f"tfprof-agent {__version__}",
        help="print the version and exit",
    )  # fmt: skip
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = sub.add_parser(
        "run",
        help="run CMD with every Python process of it traced",
        description=textwrap.fill(
            "Run CMD unmodified (no code change, no LD_PRELOAD) with every Python process "
            "it starts traced. The exit status, output and signals of CMD pass through "
            "unchanged. Without --collector, an embedded collector writes the trace to "
            "--output when the job ends; an --output that names an existing file replaces "
            "it, while a default name never replaces a file (NAME-2... is used instead)."
        ),
        epilog="examples:\n  tfprof-agent run --job mnist -o mnist.json.gz -- python train.py"
        "\n  tfprof-agent run --collector collector.example:50051 -- torchrun train.py",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("--collector", metavar="HOST:PORT", help=_help("collector"))
    run.add_argument("--job", metavar="NAME", help=_help("job"))
    run.add_argument("-o", "--output", metavar="PATH", help=_help("output"))
    run.add_argument("--source", metavar="SOURCE", help=_help("source"))
    run.add_argument("--replay-speed", metavar="X", help=_help("replay_speed"))
    run.add_argument("--replay-repeat", metavar="N", help=_help("replay_repeat"))
    run.add_argument("--host-metrics-interval", metavar="MS", help=_help("host_metrics_interval"))
    run.add_argument("--exit-timeout", metavar="SECONDS", help=_help("exit_timeout"))
    run.add_argument("--tls-ca", metavar="PEM", help=_help("tls_ca"))
    run.add_argument("--spool-dir", metavar="DIR", help=_help("spool_dir"))
    run.add_argument("--tf-ops", metavar="on|off", help=_help("tf_ops"))
    run.add_argument(
        "cmd", nargs=argparse.REMAINDER, metavar="CMD [ARGS...]",
        help="the command to run and its arguments (put -- before it if it starts with -)",
    )  # fmt: skip

    flush = sub.add_parser(
        "flush-spool",
        help="deliver records that earlier runs left in the spool",
        description="Deliver what earlier runs could not hand to their collector (it was "
        "down or too slow when the job ended). Every stream goes to the collector it was "
        "meant for, or to --collector. The collector stores each record once, however "
        "often a batch is delivered. Exit status 0 when nothing is left.",
        epilog="example: tfprof-agent flush-spool --collector collector.example:50051",
    )
    flush.add_argument(
        "--collector",
        metavar="HOST:PORT",
        help="deliver here instead of the recorded address (default: the recorded address)",
    )
    flush.add_argument("--tls-ca", metavar="PEM", help=_help("tls_ca"))
    flush.add_argument("--spool-dir", metavar="DIR", help=_help("spool_dir"))
    flush.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long each stream may take (default: 60)",
    )
    return parser


def flush_spool_command(args: argparse.Namespace, cfg: config.AgentConfig) -> int:
    from tfprof.agent.client import CollectorClient
    from tfprof.agent.flush import flush_spool
    from tfprof.agent.spool import Spool

    target = config.validate_collector(args.collector or "", "--collector") or None
    spool = Spool(cfg.spool_dir, cfg.spool_bytes)
    result = flush_spool(
        spool,
        lambda address: CollectorClient(address, cfg.tls_ca, cfg.auth_token),
        target=target,
        timeout=args.timeout,
    )
    print(
        f"tfprof: delivered {result.delivered_records:,} records in "
        f"{result.delivered_streams} stream(s) from {spool.root}",
        file=sys.stderr,
    )
    for left in result.left:
        print(f"tfprof: not delivered: {left}", file=sys.stderr)
    return 1 if result.left else 0


def _flags(args: argparse.Namespace) -> dict[str, str]:
    """The options given on the command line, keyed like ``config.OPTIONS``."""
    values = {key: getattr(args, key, None) for key in FLAGGED_OPTIONS}
    return {key: str(value) for key, value in values.items() if value is not None}


def _setup_logging(level: str) -> None:
    logger = logging.getLogger("tfprof")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("tfprof: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(getattr(logging, level, logging.WARNING))
    logger.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command not in ("run", "flush-spool"):
        parser.print_help(sys.stderr)
        return 2
    command: list[str] = []
    if args.command == "run":
        command = list(args.cmd)
        if command and command[0] == "--":
            command = command[1:]
        if not command:
            parser.error("run: missing CMD")
    try:
        if args.collector:  # a bad flag is reported as the flag the user typed
            config.validate_collector(args.collector, "--collector")
        environ = config.with_flags(_flags(args))
        cfg = config.load(environ)
        _setup_logging(cfg.log_level)
        # The job's environment is copied already: its own GRPC_* settings stay.
        config.quiet_grpc_logging()
        if args.command == "flush-spool":
            return flush_spool_command(args, cfg)
        from tfprof.agent import launcher, signals

        if cfg.collector:
            from tfprof.agent.client import check_address

            label = "--collector" if args.collector else config.OPTIONS["collector"].env
            check_address(cfg.collector, label)
        signals.block_signals()
        return launcher.run(cfg, command, environ)
    except TfprofError as exc:
        # The one place an error becomes a line and an exit status; anything else is a
        # bug and keeps its traceback.
        sys.stderr.write(f"tfprof: {exc}\n")
        return exc.exit_code


def entry() -> None:
    code = main()
    if code < 0:
        # The job died of a signal: die of the same one, so our parent sees it unchanged.
        sig = -code
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those cannot be caught anyway
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
        code = 128 + sig
    sys.exit(code)


if __name__ == "__main__":
    entry()
