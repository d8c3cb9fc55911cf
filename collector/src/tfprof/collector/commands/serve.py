"""``tfprof-collector serve``: run the collector daemon.

Flags only feed ``collector/config.py``, which merges them with the config file, the
``TFPROF_COLLECTOR_*`` environment and defaults: every flag defaults to None here so that
an option not given on the command line can come from elsewhere.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading

from tfprof.collector.config import CONFIG_ENV, OPTIONS, CollectorConfig, flag_name

log = logging.getLogger("tfprof.collector.serve")

RETENTION_INTERVAL_S = 600.0
_METAVARS = {
    "listen": "HOST:PORT",
    "data_dir": "DIR",
    "max_workers": "N",
    "max_streams": "N",
    "max_inflight_bytes": "BYTES",
    "hello_timeout": "SECONDS",
    "grace": "SECONDS",
    "max_message_bytes": "BYTES",
    "fsync": "BOOL",
    "metrics_listen": "HOST:PORT",
    "tls_cert": "PEM",
    "tls_key": "PEM",
    "auth_token_file": "FILE",
    "token_key_file": "FILE",
    "tls_client_ca": "PEM",
    "insecure": "BOOL",
    "data_group": "GROUP",
    "redact": "NAMES",
    "empty_stream_grace": "SECONDS",
    "retain_days": "DAYS",
    "retain_bytes": "BYTES",
    "lake": "URL",
    "compact_interval": "SECONDS",
    "rank_figures_interval": "SECONDS",
    "log_level": "LEVEL",
}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help="run the collector daemon",
        description="Run the collector daemon. Precedence: flags > --config file > "
        "TFPROF_COLLECTOR_* environment > defaults.",
    )
    p.add_argument(
        "--config", metavar="FILE", help=f"TOML file of options (or {CONFIG_ENV}); keys as flags"
    )
    for key, opt in OPTIONS.items():
        # --insecure alone says true (as one types it); --insecure false works too.
        bare = {"nargs": "?", "const": "true"} if key == "insecure" else {}
        p.add_argument(
            flag_name(key),
            dest=f"opt_{key}",
            default=None,
            metavar=_METAVARS.get(key, "VALUE"),
            help=f"{opt.doc} [{opt.env}; default: {opt.default or 'none'}]",
            **bare,  # type: ignore[arg-type]
        )
    p.set_defaults(func=run)


def _flags(args: argparse.Namespace) -> dict[str, object]:
    flags = {key: getattr(args, f"opt_{key}") for key in OPTIONS}
    if flags["log_level"] is None:  # `tfprof-collector --log-level X serve` works too
        flags["log_level"] = getattr(args, "log_level", None)
    return flags


def run(args: argparse.Namespace) -> int:
    from tfprof.collector import config as config_module
    from tfprof.collector.service.exposure import check_listener, secure_data_dir
    from tfprof.collector.store import Store

    config = config_module.load(_flags(args), args.config)
    logging.getLogger("tfprof").setLevel(config.log_level)
    check_listener(config)  # before anything is made or bound
    store = Store(config.data_dir)
    secure_data_dir(store.root, config.data_group)
    # One serve per data dir: two would interleave writes to the same streams.
    with store.serving():
        return _serve(config)


def _auth_said(config: CollectorConfig) -> str:
    kinds = [k for k, on in (("fleet token", config.auth_token_file),
                             ("job and node tokens", config.token_key_file)) if on]  # fmt: skip
    if kinds:
        return " and ".join(kinds)
    return "off: capture control from this host only"


def _serve(config: CollectorConfig) -> int:
    from tfprof.collector.lake.serving import start_compactor
    from tfprof.collector.service.metrics import CollectorMetrics, serve_metrics
    from tfprof.collector.service.retention import Policy, enforce
    from tfprof.collector.service.server import CollectorServer
    from tfprof.core.rlimits import raise_open_files_limit

    nofile = raise_open_files_limit()
    metrics = CollectorMetrics()
    server = CollectorServer.from_config(config, metrics)
    policy = Policy(config.retain_days, config.retain_bytes)
    stop = threading.Event()

    # Installed before "listening on" is printed: a SIGTERM right after start still drains.
    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if policy.active:
        enforce(server.store, policy)  # before serving: start within the limits
    # After retention: what it just deleted is not worth compacting.
    compactor = start_compactor(
        server.store, config.lake, config.compact_interval, config.empty_stream_grace
    )

    server.start()
    print(f"listening on {server.address}", flush=True)
    http = None
    if config.metrics_listen:
        http, bound = serve_metrics(metrics, config.metrics_listen)
        print(f"metrics on http://{bound}/metrics", flush=True)
    log.info(
        "collector serving %s (tls %s, auth %s, fsync %s, open files %d) storing under %s",
        server.address,
        "on, client certificates required" if config.tls_client_ca else
        "on" if config.tls else "off",
        _auth_said(config),
        "on" if config.fsync else "off",
        nofile,
        config.data_dir,
    )  # fmt: skip

    def retention_loop() -> None:
        while not stop.wait(RETENTION_INTERVAL_S):
            try:
                enforce(server.store, policy)
            except Exception:  # never let housekeeping take the server down
                log.exception("retention pass failed")

    if policy.active:
        threading.Thread(target=retention_loop, name="tfprof-retention", daemon=True).start()

    def rank_figures_loop() -> None:
        from tfprof.collector.service.rank_figures import refresh

        while not stop.wait(config.rank_figures_interval):
            try:
                refresh(metrics.ranks, metrics.live, [config.data_dir])
            except Exception:  # a damaged or vanishing run must not stop the metrics
                log.exception("per-rank figures not refreshed")

    if config.rank_figures_interval > 0:
        threading.Thread(target=rank_figures_loop, name="tfprof-ranks", daemon=True).start()

    while not stop.wait(1.0):
        pass
    open_streams = server.store.open_streams()
    log.info(
        "shutting down: %d stream(s) open get up to %.1f s to finish", open_streams, config.grace_s
    )
    server.stop(grace=config.grace_s)
    compactor.stop()  # publishes what the last streams sent
    if http is not None:
        http.shutdown()
    log.info("stopped; %d stream(s) still open were cut off", server.store.open_streams())
    return 0
