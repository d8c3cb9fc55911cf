"""``tfprof-agent daemon``: the launcher's relay for every traced process on a node.

Processes started with the environment ``tfprof-agent env`` prints connect to the
daemon's Unix socket; each gets its own collector stream, host metrics sampled from
outside, the clock offset and the spool, exactly as under ``tfprof-agent run``
(``hub.RelayHub`` is the same code). A stream ends when its process hangs up. On
SIGTERM or SIGINT the daemon stops taking frames (each process sends the frame it was
writing again, whole, to the next daemon on a new stream), reads what is in the
sockets, ends every stream with a goodbye, delivers what it received, spools what it
cannot deliver in time, and says so in one line.

The socket is open to every user of the node, so the daemon trusts the kernel, not the
hello: each connection's uid comes from ``SO_PEERCRED`` and a job run is bound to the
uid of its first process (``run_owners``); connections are capped in total and per uid,
and the open-files limit is raised at start (socket_server.py says what else is bounded).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfprof.agent.inprocess import clock, identity
from tfprof.agent.inprocess.config import AgentConfig
from tfprof.agent.inprocess.errors import UsageError
from tfprof.agent.launch import bundle
from tfprof.core.names import is_safe_name
from tfprof.core.ratelimit import RateLimitedLog

if TYPE_CHECKING:
    from tfprof.agent.relay.hub import RelayHub
    from tfprof.agent.relay.run_owners import RunOwners
    from tfprof.agent.relay.socket_server import ConnectionLimits

log = logging.getLogger("tfprof.agent.launch.daemon")

DEFAULT_SOCKET = "/run/tfprof/agent.sock"
BOOTSTRAP_DIR = "bootstrap"  # beside the socket, unless --bootstrap-dir says otherwise
READ_DRAIN_S = 5.0  # least a stopping daemon waits for its readers to empty the sockets


def notice(message: str) -> None:
    sys.stderr.write(f"tfprof: {message}\n")
    sys.stderr.flush()


def default_bootstrap(socket_path: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(socket_path)), BOOTSTRAP_DIR)


def identify(info: dict[str, Any]) -> tuple[str, str]:
    """(job, run id) from a hook's hello: it works them out itself (identity.resolve);
    a hook of an older release, or a bad name, still gets a safe one."""
    job = str(info.get("job", ""))
    if not is_safe_name(job):
        job = identity.safe_name(job, fallback="unnamed")
    run_id = str(info.get("run_id", ""))
    if not is_safe_name(run_id):
        run_id = identity.run_id(f"{job}|pid:{info.get('pid', 0)}")
    return job, run_id


def owned_identify(owners: RunOwners, refusals: RateLimitedLog) -> Any:
    """``identify``, refusing a process whose uid may not join the run it names."""

    def check(info: dict[str, Any]) -> tuple[str, str] | None:
        job, run_id = identify(info)
        uid = int(info.get("peer_uid", -1))
        owner = owners.claim(job, run_id, uid)
        if owner is None:
            return job, run_id
        refusals.note(
            f"refused pid {info.get('peer_pid', '?')} of uid {uid}: job {job} run {run_id} "
            f"belongs to uid {owner}"
        )
        return None

    return check


def connection_limits(cfg: AgentConfig, open_files: int) -> ConnectionLimits:
    """The configured caps, the total kept within the descriptors this process has."""
    from tfprof.agent.relay.socket_server import ConnectionLimits
    from tfprof.core.rlimits import RESERVED_FDS

    total = max(1, min(cfg.daemon_max_connections, open_files - RESERVED_FDS))
    return ConnectionLimits(
        max_connections=total,
        max_per_uid=min(cfg.daemon_max_connections_per_uid, total),
        hello_timeout_s=cfg.daemon_hello_timeout_s,
    )


def claim_socket(path: str) -> None:
    """Make the socket's folder; refuse a socket another daemon still listens on, and
    remove one a dead daemon left."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    if not os.path.exists(path):
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError:
        os.unlink(path)  # nobody answers: left by a daemon that died
        return
    finally:
        probe.close()
    raise UsageError(f"another tfprof daemon is listening on {path}")


class NodeDaemon:
    def __init__(
        self, cfg: AgentConfig, socket_path: str, bootstrap_dir: str, abis: list[str]
    ) -> None:
        if not cfg.collector:
            raise UsageError("daemon: --collector HOST:PORT is required")
        self.cfg = cfg
        self.socket_path = os.path.abspath(socket_path)
        self.bootstrap_dir = bootstrap_dir
        self.abis = abis
        self._warned = False

    def _failure(self, why: str) -> None:
        if not self._warned:
            self._warned = True
            notice(
                f"cannot deliver records to {self.cfg.collector} ({why}); they wait in "
                f"{self.cfg.spool_dir} until it answers"
            )

    def run(self, stop: threading.Event) -> int:
        from tfprof.agent.relay.collector_client import CollectorClient
        from tfprof.agent.relay.hub import RelayHub
        from tfprof.agent.relay.run_owners import RunOwners
        from tfprof.agent.relay.spool import Spool
        from tfprof.core.rlimits import raise_open_files_limit

        limits = connection_limits(self.cfg, raise_open_files_limit())
        claim_socket(self.socket_path)
        if self.bootstrap_dir:
            try:
                for line in bundle.write_bundle(self.bootstrap_dir, self.abis):
                    notice(line)
            except OSError as exc:
                raise UsageError(
                    f"cannot write the bootstrap folder {self.bootstrap_dir}: {exc}"
                ) from None
        client = CollectorClient.from_config(self.cfg)
        spool = Spool(self.cfg.spool_dir, self.cfg.spool_bytes)
        spool_root = Path(self.cfg.spool_dir)
        try:  # the run owners live beside the per-uid folders, for root alone
            spool_root.mkdir(mode=0o700, parents=True, exist_ok=True)
            owners = RunOwners(spool_root, self.cfg.daemon_root_may_join)
        except OSError as exc:
            notice(f"cannot keep run owners in {spool_root} ({exc}); kept in memory")
            owners = RunOwners(None, self.cfg.daemon_root_may_join)
        check = owned_identify(owners, RateLimitedLog(log))
        hub = RelayHub(
            self.cfg, client, spool, self.socket_path, check, self._failure,
            mode=0o666, finish_on_close=True, limits=limits,
        )  # fmt: skip
        hub.connect_remote(
            lambda records, streams: notice(
                f"delivered {records:,} spooled records of earlier runs ({streams} streams)"
            )
        )
        hub.start()
        root = "root may join any run" if owners.root_may_join else "root may not join them"
        notice(
            f"daemon listening on {self.socket_path}, relaying to {self.cfg.collector}; "
            f"job runs are bound to the uid that opened them ({root}); at most "
            f"{limits.max_connections} connections, {limits.max_per_uid} per uid"
        )
        while not stop.wait(1.0):
            pass
        return self._shutdown(hub)

    def _shutdown(self, hub: RelayHub) -> int:
        # Exactly once across a stop: every byte a hook wrote into its connection is
        # read, and every stream read is finished with a goodbye of what it carried
        # (hub._on_closed), delivered or spooled with it, before the daemon exits. The
        # hook counts the one frame its broken send cut short and resends nothing.
        hub.stop()  # no new connections (those waiting are taken), no more samples
        hub.relay.stop_reading()
        # Readers take what is still in the sockets, then finish their streams; after
        # stop_reading nothing more comes in, so this ends in moments.
        if not hub.relay.wait_closed(max(READ_DRAIN_S, self.cfg.delivery_timeout_s)):
            notice(
                f"{len(hub.relay.links)} connection(s) were still being read at the stop; "
                "records they held are not counted"
            )
        hub.wait_finishers(self.cfg.delivery_timeout_s + 15.0)
        totals = hub.ended
        waiting = (
            f"; {totals.spooled:,} records of {totals.spooled_streams} stream(s) wait in "
            f"{self.cfg.spool_dir} for the next daemon (or `tfprof-agent flush-spool`)"
            if totals.spooled
            else ""
        )
        notice(
            f"daemon stopped: {totals.streams} stream(s), {totals.delivered:,} records "
            f"delivered, {totals.dropped:,} dropped{waiting}"
        )
        hub.client.close()
        return 0


def run(cfg: AgentConfig, socket_path: str, bootstrap_dir: str, abis: list[str]) -> int:
    """Serve until SIGTERM or SIGINT; exit status 0 after a clean stop."""
    # The hooks on this node stamp records and read windows on the skewed clock (tests);
    # the offset measured here must be that clock's, or windows land off by the skew.
    clock.set_skew(cfg.clock_skew_ns)
    daemon = NodeDaemon(cfg, socket_path, bootstrap_dir, abis)
    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        return daemon.run(stop)
    finally:
        for sig, handler in previous.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(sig, handler)
