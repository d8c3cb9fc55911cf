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

from tfprof.agent.inprocess import config
from tfprof.agent.inprocess.capture_control import parse_capture_mode
from tfprof.core.cli_parser import GuessingParser
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
    "replay_stretch",
    "host_metrics_interval",
    "exit_timeout",
    "tls_ca",
    "spool_dir",
    "api",
    "nvtx",
    "memory",
    "torch_ops",
    "capture",
    "capture_finalize",
    "tf_ops",
    "steps",
    "redact",
    "daemon_max_connections",
    "daemon_max_connections_per_uid",
    "daemon_hello_timeout",
    "daemon_root_may_join",
    "code",
    "code_hz",
    "code_launch_every",
)


NODE_COMMANDS = ("daemon", "env", "bundle")

# What a default looks like when the option's own default is empty.
EMPTY_DEFAULTS = {
    "collector": "none: an embedded collector writes the trace",
    "job": "the command's name, a timestamp and a random suffix",
    "output": "tfprof-JOB.trace.json.gz in the current directory",
    "tls_ca": "none: plaintext gRPC",
    "redact": "the built-in names only",
}


def _help(key: str) -> str:
    opt = config.OPTIONS[key]
    default = opt.default or EMPTY_DEFAULTS.get(key, "")
    shown = f" (default: {default})" if default else ""
    return f"{opt.doc}{shown} [env {opt.env}]".replace("%", "%%")


def build_parser() -> argparse.ArgumentParser:
    parser = GuessingParser(
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
            "it, while a default name never replaces a file (NAME-2... is used instead). "
            "A command that cannot run, or a Python script that does not exist, is refused "
            "before anything starts. A job that failed to start (exit status 2, 126 or 127 "
            "within 10 s, not one record traced) gets one line instead of the summary, and "
            "no trace is written."
        ),
        epilog="examples:\n  tfprof-agent run --job mnist -o mnist.json.gz -- python train.py"
        "\n  tfprof-agent run --collector collector.example:50051 -- torchrun train.py"
        "\n  tfprof-agent run --capture periodic:2s/60s --collector collector.example:50051 "
        "-- python train.py",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("--collector", metavar="HOST:PORT", help=_help("collector"))
    run.add_argument("--job", metavar="NAME", help=_help("job"))
    run.add_argument("-o", "--output", metavar="PATH", help=_help("output"))
    run.add_argument("--source", metavar="SOURCE", help=_help("source"))
    run.add_argument("--replay-speed", metavar="X", help=_help("replay_speed"))
    run.add_argument("--replay-repeat", metavar="N", help=_help("replay_repeat"))
    run.add_argument("--replay-stretch", metavar="FACTOR", help=_help("replay_stretch"))
    run.add_argument("--host-metrics-interval", metavar="MS", help=_help("host_metrics_interval"))
    run.add_argument("--exit-timeout", metavar="SECONDS", help=_help("exit_timeout"))
    run.add_argument("--tls-ca", metavar="PEM", help=_help("tls_ca"))
    run.add_argument("--spool-dir", metavar="DIR", help=_help("spool_dir"))
    for key in ("api", "nvtx", "memory", "torch_ops", "steps"):  # on/off switches
        run.add_argument(f"--{key.replace('_', '-')}", choices=("on", "off"), help=_help(key))
    run.add_argument("--capture", metavar="MODE", help=_help("capture"))
    run.add_argument(
        "--capture-finalize", action="store_const", const="1", help=_help("capture_finalize")
    )
    run.add_argument("--tf-ops", metavar="on|off", help=_help("tf_ops"))
    run.add_argument("--code", choices=("off", "sample", "launch"), help=_help("code"))
    run.add_argument("--code-hz", metavar="HZ", help=_help("code_hz"))
    run.add_argument("--code-launch-every", metavar="N", help=_help("code_launch_every"))
    run.add_argument("--redact", metavar="PATTERNS", help=_help("redact"))
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
    _add_node_commands(sub)
    return parser


def _add_node_commands(sub: argparse._SubParsersAction[GuessingParser]) -> None:
    """``daemon``, ``env`` and ``bundle``: tracing without a launcher."""
    from tfprof.agent.launch.daemon import DEFAULT_SOCKET
    from tfprof.agent.launch.daemon_env import CAPTURE_MODES

    socket_help = (
        f"the daemon's Unix socket (default: {DEFAULT_SOCKET}) [env {config.OPTIONS['socket'].env}]"
    )
    bootstrap_help = "the bootstrap folder (default: a folder named bootstrap beside the socket)"
    daemon = sub.add_parser(
        "daemon",
        help="relay every traced process on this node to a collector (one per node)",
        description=textwrap.fill(
            "Do for every traced process on this node what `tfprof-agent run` does for its "
            "job: accept hook connections on one Unix socket, one collector stream per "
            "process, batching, spool, clock offsets and host metrics, each record stored "
            "once or counted. Processes opt in with the environment `tfprof-agent env` "
            "prints. Also writes the bootstrap folder that environment points at. SIGTERM or "
            "SIGINT stops it cleanly: streams are delivered or spooled, and one line says "
            "what went where; the processes reconnect to the next daemon."
        ),
        epilog="example:\n  tfprof-agent daemon --collector collector.example:4317 "
        "--socket /run/tfprof/agent.sock",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    daemon.add_argument(
        "--collector", metavar="HOST:PORT", required=True,
        help="the collector to deliver to (required) [env TFPROF_COLLECTOR]",
    )  # fmt: skip
    daemon.add_argument("--socket", metavar="PATH", help=socket_help)
    daemon.add_argument("--bootstrap-dir", metavar="DIR", help=bootstrap_help)
    daemon.add_argument(
        "--python-abi", metavar="ABI", action="append", default=[],
        help="also put cupti-python for this CPython ABI in the bootstrap folder, where it "
        "is installed here (cp311, or cpython-311-linux-x86_64; repeatable) (default: none)",
    )  # fmt: skip
    daemon.add_argument("--spool-dir", metavar="DIR", help=_help("spool_dir"))
    daemon.add_argument("--tls-ca", metavar="PEM", help=_help("tls_ca"))
    daemon.add_argument(
        "--host-metrics-interval", metavar="MS", help=_help("host_metrics_interval")
    )
    daemon.add_argument("--redact", metavar="PATTERNS", help=_help("redact"))
    for flag, key, metavar in (
        ("--max-connections", "daemon_max_connections", "N"),
        ("--max-connections-per-uid", "daemon_max_connections_per_uid", "N"),
        ("--hello-timeout", "daemon_hello_timeout", "SECONDS"),
        ("--root-may-join", "daemon_root_may_join", "on|off"),
    ):
        daemon.add_argument(flag, dest=key, metavar=metavar, help=_help(key))

    env = sub.add_parser(
        "env",
        help="print the environment that makes a process traced by the node daemon",
        description=textwrap.fill(
            "Print the environment that makes any process started with it traced by the "
            "node daemon: the bootstrap folder first on PYTHONPATH (the process's own "
            "PYTHONPATH is kept after it), the daemon's socket, the capture mode, and the "
            "job name if given. Without --job, the job is TFPROF_JOB, else the scheduler's "
            "(SLURM_JOB_ID, TORCHELASTIC_RUN_ID, the Kubernetes pod from TFPROF_POD_NAME "
            "and TFPROF_POD_NAMESPACE), else the command; processes of one job share one "
            "run id."
        ),
        epilog='example:\n  eval "$(tfprof-agent env --job resnet)" && torchrun '
        "--nproc-per-node 8 train.py",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    env.add_argument("--socket", metavar="PATH", help=socket_help)
    env.add_argument("--bootstrap-dir", metavar="DIR", help=bootstrap_help)
    env.add_argument("--job", metavar="NAME",
                     help="job name, 1-64 of A-Z a-z 0-9 . _ - (default: from the scheduler, "
                     "else the command) [env TFPROF_JOB]")  # fmt: skip
    env.add_argument(
        "--format", choices=("sh", "json"), default="sh",
        help="sh: POSIX export lines; json: one object for tools (default: sh)",
    )  # fmt: skip
    env.add_argument(
        "--capture", metavar="MODE", default="on-demand",
        help=f"when processes trace: {CAPTURE_MODES} (default: on-demand)",
    )  # fmt: skip

    bundle = sub.add_parser(
        "bundle",
        help="write the self-contained bootstrap folder (for images without tfprof)",
        description=textwrap.fill(
            "Write DIR: the bootstrap folder that traces any CPython 3.9 or newer without "
            "tfprof installed (sitecustomize and the standard-library hook), plus "
            "cupti-python for each --python-abi where it is installed here (never "
            "downloaded). A pod mounts it read-only; an existing DIR is replaced whole."
        ),
        epilog="example:\n  tfprof-agent bundle /run/tfprof/bootstrap --python-abi cp311",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bundle.add_argument("dir", metavar="DIR", help="the folder to write (replaced if it exists)")
    bundle.add_argument(
        "--python-abi", metavar="ABI", action="append", default=[],
        help="put cupti-python for this CPython ABI in the folder (cp311, or "
        "cpython-311-linux-x86_64; repeatable) (default: none)",
    )  # fmt: skip


def node_command(args: argparse.Namespace, cfg: config.AgentConfig) -> int:
    """``daemon``, ``env`` and ``bundle``."""
    from tfprof.agent.launch import bundle, daemon, daemon_env

    if args.command == "bundle":
        for line in bundle.write_bundle(args.dir, args.python_abi):
            print(f"tfprof: {line}", file=sys.stderr)
        print(f"tfprof: bootstrap folder written to {os.path.abspath(args.dir)}", file=sys.stderr)
        return 0
    socket_path = os.path.abspath(args.socket or cfg.socket or daemon.DEFAULT_SOCKET)
    bootstrap_dir = os.path.abspath(args.bootstrap_dir or daemon.default_bootstrap(socket_path))
    if args.command == "env":
        env = daemon_env.daemon_environment(
            socket_path, bootstrap_dir, args.job or "", args.capture
        )
        render = daemon_env.render_json if args.format == "json" else daemon_env.render_sh
        sys.stdout.write(render(env))
        return 0
    from tfprof.agent.relay.collector_client import check_address

    check_address(cfg.collector, "--collector")
    return daemon.run(cfg, socket_path, bootstrap_dir, args.python_abi)


def flush_spool_command(args: argparse.Namespace, cfg: config.AgentConfig) -> int:
    from tfprof.agent.relay.collector_client import CollectorClient
    from tfprof.agent.relay.flush import flush_spool
    from tfprof.agent.relay.spool import Spool

    target = config.validate_collector(args.collector or "", "--collector") or None
    spool = Spool(cfg.spool_dir, cfg.spool_bytes)
    result = flush_spool(
        spool,
        lambda address: CollectorClient.from_config(cfg, address),
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
    # `env --job` names the job of the processes it prints for, not this one's.
    keys = [k for k in FLAGGED_OPTIONS if not (args.command == "env" and k == "job")]
    values = {key: getattr(args, key, None) for key in keys}
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
    if args.command not in ("run", "flush-spool", *NODE_COMMANDS):
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
        if getattr(args, "collector", None):  # a bad flag is reported as the flag the user typed
            config.validate_collector(args.collector, "--collector")
        if getattr(args, "capture", None):
            parse_capture_mode(args.capture, "--capture")
        environ = config.with_flags(_flags(args))
        cfg = config.load(environ)
        _setup_logging(cfg.log_level)
        # The job's environment is copied already: its own GRPC_* settings stay.
        config.quiet_grpc_logging()
        if args.command == "flush-spool":
            return flush_spool_command(args, cfg)
        if args.command in NODE_COMMANDS:
            return node_command(args, cfg)
        from tfprof.agent.launch import launcher, signals

        if cfg.collector:
            from tfprof.agent.relay.collector_client import check_address

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
