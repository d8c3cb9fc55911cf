"""``tfprof-collector serve``: run the collector daemon."""

from __future__ import annotations

import argparse
import signal
import threading


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help="run the collector daemon")
    p.add_argument(
        "--listen",
        default="127.0.0.1:4317",
        metavar="HOST:PORT",
        help="address to listen on; port 0 picks one and prints it (default: 127.0.0.1:4317)",
    )
    p.add_argument("--data-dir", required=True, metavar="DIR", help="where records are stored")
    p.add_argument(
        "--max-workers",
        type=int,
        default=256,
        metavar="N",
        help="concurrent streams served (default: 256)",
    )
    p.add_argument(
        "--grace",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="on SIGTERM, how long running streams may take to finish (default: 10)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tfprof.collector.server import CollectorServer

    server = CollectorServer(args.listen, args.data_dir, max_workers=args.max_workers).start()
    print(f"listening on {server.address}", flush=True)
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stop.wait(1.0):
        pass
    server.stop(grace=args.grace)
    return 0
