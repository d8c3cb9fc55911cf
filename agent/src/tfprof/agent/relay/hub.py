"""The relay the launcher and the node daemon share.

Hooks connect to one Unix socket (``RelayServer``); each traced process that says hello
gets its own collector stream (``ProcessLink``), host samples taken from outside with
psutil, the clock offset estimated against the collector, and the on-disk spool when the
collector is slow or down. The launcher serves one job and finishes every stream when
the job ends; the daemon serves every job on the node and finishes each stream when its
process hangs up (``finish_on_close``).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any

from tfprof.agent.relay.collector_client import CollectorClient
from tfprof.agent.relay.host_metrics import HostSample, HostSampler
from tfprof.agent.relay.process_end import ProcessEnd, ProcessWatch
from tfprof.agent.relay.process_link import ProcessLink
from tfprof.agent.relay.socket_server import ConnectionLimits, RelayServer, new_stream_id
from tfprof.agent.relay.spool import STREAM_SECRET_BYTES, Spool
from tfprof.core.redact import patterns_from, redact_argv
from tfprof.core.version import PROTOCOL_VERSION, __version__
from tfprof.proto import collector_pb2 as pb

log = logging.getLogger("tfprof.agent.relay.hub")

# (job name, run id) of a process, from its hello (and the kernel's peer_uid in it): the
# launcher's own, or the hook's; None refuses the process (its connection is closed).
Identify = Callable[[dict[str, Any]], tuple[str, str] | None]


class StreamTotals:
    """What became of finished streams (a daemon keeps counts, not the streams)."""

    def __init__(self) -> None:
        self.streams = self.delivered = self.dropped = 0
        self.spooled = self.spooled_streams = 0

    def add(self, link: ProcessLink) -> None:
        self.streams += 1
        self.delivered += link.sender.records_acked
        self.dropped += link.sender.dropped
        self.spooled += link.sender.spooled_records
        self.spooled_streams += 1 if link.sender.spooled_records else 0


class RelayHub:
    def __init__(
        self,
        cfg: Any,  # config.AgentConfig (Any: the launcher passes its own, tests a stand-in)
        client: CollectorClient,
        spool: Spool | None,
        socket_path: str,
        identify: Identify,
        on_failure: Callable[[str], None],
        *,
        mode: int = 0o600,
        finish_on_close: bool = False,
        limits: ConnectionLimits | None = None,
    ) -> None:
        self.cfg = cfg
        self.client = client
        self.spool = spool
        self.host = socket.gethostname()
        self.clock: tuple[int, int] = (0, 0)
        self._identify = identify
        self._on_failure = on_failure
        self._links_by_pid: dict[int, ProcessLink] = {}
        self._finishers: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        self.ended = StreamTotals()  # streams a daemon finished as their processes hung up
        self.sampler = HostSampler(cfg.host_metrics_interval_ms, self._deliver_host)
        self._redact = patterns_from(getattr(cfg, "redact", ()) or ())
        self.relay = RelayServer(
            socket_path, self._on_hello, mode, self._on_closed if finish_on_close else None,
            limits,
        )  # fmt: skip

    # -- the collector ----------------------------------------------------------------

    def connect_remote(self, on_flushed: Callable[[int, int], None]) -> bool:
        """Estimate the clock, deliver earlier spools, keep the clock fresh; False when
        the collector does not answer (streams spool and retry)."""
        estimate = self.client.estimate_clock()
        if estimate is None:
            self._on_failure(self.client.last_error or "unreachable")
        else:
            self.clock = estimate
            # What earlier runs on this host left in the spool goes out now.
            threading.Thread(
                target=self._flush_old_spool, args=(on_flushed,), name="tfprof-flush", daemon=True
            ).start()
        if self.cfg.clock_interval_s > 0:
            threading.Thread(target=self._track_clock, name="tfprof-clock", daemon=True).start()
        return estimate is not None

    def _flush_old_spool(self, on_flushed: Callable[[int, int], None]) -> None:
        from tfprof.agent.relay.flush import flush_spool

        cfg = self.cfg
        assert self.spool is not None  # a remote collector always has a spool
        result = flush_spool(
            self.spool,
            lambda target: CollectorClient.from_config(cfg, target),
            target=cfg.collector,
            only_target=True,
        )
        if result.delivered_streams:
            on_flushed(result.delivered_records, result.delivered_streams)

    def _track_clock(self) -> None:
        # Clocks drift: re-estimate the offset and send it with the next batches.
        while not self.stopping.wait(self.cfg.clock_interval_s):
            estimate = self.client.estimate_clock()
            if estimate is None:
                continue
            self.clock = estimate
            for link in list(self.relay.links):
                link.update_clock(*estimate)

    # -- traced processes ---------------------------------------------------------------

    def start(self) -> None:
        self.relay.start()
        self.sampler.start()

    def _on_hello(self, info: dict[str, Any]) -> ProcessLink | None:
        named = self._identify(info)
        if named is None:
            return None
        job, run_id = named
        clock = info.get("clock", {})
        hello = pb.Hello(
            protocol_version=PROTOCOL_VERSION,
            job=job,
            run_id=run_id,
            host=self.host,
            pid=int(info.get("pid", 0)),
            ppid=int(info.get("ppid", 0)),
            task=str(info.get("task", "")),
            # Redacted before the hello goes anywhere: spool, wire, collector.
            argv=redact_argv([str(a) for a in info.get("argv", [])], self._redact),
            agent_version=str(info.get("agent_version", __version__)),
            source=str(info.get("source", "")),
            clock=pb.ClockSnapshot(
                realtime_ns=int(clock.get("realtime_ns", 0)),
                monotonic_ns=int(clock.get("monotonic_ns", 0)),
                tracer_ns=int(clock.get("tracer_ns", 0)),
            ),
            clock_offset_ns=self.clock[0],
            clock_rtt_ns=self.clock[1],
            stream_id=new_stream_id(),
            # Only this relay (and its spool) knows it: a reconnect proves the stream
            # is ours; nobody who learns the stream id can speak for it.
            stream_secret=os.urandom(STREAM_SECRET_BYTES),
            capture_mode=str(info.get("capture", "")),
        )
        uid = int(info.get("peer_uid", -1))
        if uid >= 0:
            hello.uid = uid
            hello.user = user_name(uid)
        bases = (int(info.get("records_base", 0)), int(info.get("dropped_base", 0)))
        link = ProcessLink(self.client, hello, self._on_failure, self.spool, bases)
        # Sampled by the pid we see (SO_PEERCRED), which differs from the one it reports
        # when it runs in another pid namespace (a pod). A pid can say hello twice (it
        # re-execs itself, or reconnects to a restarted daemon): samples go to its latest.
        link.sampled_pid = int(info.get("peer_pid") or 0) or hello.pid
        watch = info.get("peer_watch")
        if not isinstance(watch, ProcessWatch):  # a relay that did not look (tests)
            watch = ProcessWatch(int(info.get("peer_pid") or 0))
        link.watch = watch
        with self._lock:
            earlier = self._links_by_pid.get(link.sampled_pid)
            latest = link
            if (
                earlier is not None
                and earlier.watch is not None
                and watch.start_time is not None
                and earlier.watch.start_time == watch.start_time
            ):
                # The same process says hello again: it exec'ed (its old connection may
                # stay open, inherited), so its older image ended without a goodbye while
                # the process went on, and that stream stays incomplete. Which image is
                # older is its hello's own clock, not the order the hellos were read in.
                older, latest = sorted((earlier, link), key=lambda k: k.hello.clock.monotonic_ns)
                older.outlived = older.goodbye is None
            self._links_by_pid[link.sampled_pid] = latest
        self.sampler.add(link.sampled_pid)
        return link

    def _deliver_host(self, pid: int, sample: HostSample) -> None:
        link = self._links_by_pid.get(pid)
        if link is not None and link.add_host_sample(sample):
            link.flush_host()

    def _on_closed(self, link: ProcessLink) -> None:
        """A daemon's process hung up, or the stopping daemon read its connection to the
        end: finish its stream now, in the background (the daemon waits for these)."""
        self.relay.forget(link)
        with self._lock:
            if self._links_by_pid.get(link.sampled_pid) is link:
                del self._links_by_pid[link.sampled_pid]
                self.sampler.remove(link.sampled_pid)
        if link.goodbye is None and self.stopping.is_set():
            # The daemon stops, the process lives on and reconnects on a new stream:
            # this one ends with a goodbye of what it carried, so what it read is
            # delivered (or spooled) and the run is whole, not cut off.
            link.goodbye = link.carried()

        def finish() -> None:
            # Hung up without a goodbye: link.end says whether the process ended then.
            link.finish(timeout=self.cfg.delivery_timeout_s)
            with self._lock:
                self.ended.add(link)
                self._finishers.discard(threading.current_thread())

        thread = threading.Thread(target=finish, name="tfprof-finish", daemon=True)
        with self._lock:
            self._finishers.add(thread)
        thread.start()

    # -- the end ------------------------------------------------------------------------

    def finish_links(
        self, links: Iterable[ProcessLink], exit_code: int = 0, child_pid: int = 0
    ) -> list[ProcessLink]:
        """Say goodbye on every stream at once; the links that were not delivered.
        ``child_pid`` ended with ``exit_code`` (the launcher reaped it); of the other
        processes that never said goodbye, those gone are known to have ended."""
        links = list(links)
        results: dict[int, bool] = {}
        for link in links:
            if link.goodbye is not None or link.outlived:
                continue  # said goodbye, or its image ended while the process went on
            if child_pid and link.sampled_pid == child_pid:
                link.end = ProcessEnd.from_status(exit_code)
            elif link.end is None and link.watch is not None:
                link.end = link.watch.ended()

        def finish(link: ProcessLink) -> None:
            results[id(link)] = link.finish(
                timeout=self.cfg.delivery_timeout_s, exit_code=exit_code
            )

        # Only started threads are joined: a start() that fails (no threads left) must
        # not leave an unstarted thread in the list; that link finishes here instead.
        finishers: list[threading.Thread] = []
        for link in links:
            thread = threading.Thread(target=finish, args=(link,), name="tfprof-finish")
            try:
                thread.start()
            except RuntimeError:
                finish(link)
            else:
                finishers.append(thread)
        for thread in finishers:
            thread.join()
        return [link for link in links if not results.get(id(link), False)]

    def wait_finishers(self, timeout: float) -> None:
        """Wait for streams a daemon is finishing in the background."""
        with self._lock:
            threads = list(self._finishers)
        for thread in threads:
            thread.join(timeout)

    def stop(self) -> None:
        """Stop accepting and sampling; streams stay open until finished."""
        self.stopping.set()
        self.sampler.stop()
        self.relay.close()


def user_name(uid: int) -> str:
    """The login name of ``uid`` here, or "" (a pod's uid may have none on the node)."""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OSError):
        return ""
