"""``tfprof-agent run``: start the job with the bootstrap on its path and relay its records.

The launcher is the job's parent. It forwards signals, returns the job's exit status
unchanged, samples host metrics of every traced process, streams everything to a
collector and, when none is named, runs one embedded and writes the trace at the end.

A job that failed to start gets one line instead of a summary, and no trace. The rule
(``failed_to_start``) needs all of: an exit status that by convention means the command
could not run (2: the interpreter could not open its script, or a command-line usage
error; 126 and 127: a shell's "not executable" and "not found"), within
``FAILED_START_S`` of the start, and not one record traced, delivered, spooled or
dropped by any process. Any other failure, any record, or a later exit gets the usual
summary and trace: a short job that ran and failed (``sys.exit(1)``, an exception) is
never reported as one that did not start.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from tfprof.agent.inprocess import clock
from tfprof.agent.inprocess.config import AgentConfig, child_environment
from tfprof.agent.inprocess.errors import CommandNotExecutable, CommandNotFound, UsageError
from tfprof.agent.inprocess.sources.cupti_loading import interpreter_abi, libcupti_path
from tfprof.agent.launch import bundle
from tfprof.agent.launch.prestart import (
    check_command,
    check_script,
    cuda_driver_present,
    default_job_name,
    free_path,
    notice,
    python_started_without_site,
    resolve_source,
)
from tfprof.agent.launch.signals import FORWARDED_SIGNALS, SignalForwarder

if TYPE_CHECKING:
    from tfprof.agent.relay.collector_client import CollectorClient
    from tfprof.agent.relay.hub import RelayHub
    from tfprof.agent.relay.process_link import ProcessLink
    from tfprof.agent.relay.spool import Spool
    from tfprof.collector.embedded import EmbeddedCollector

log = logging.getLogger("tfprof.agent.launch.launcher")

LATE_READERS_S = 10.0  # for the connections the relay takes from its backlog at the end

# Exit statuses that by convention mean the command never got to run its work: a usage
# error or a script the interpreter cannot open (2), found but not executable (126), not
# found (127).
NOT_STARTED_STATUSES = frozenset({2, 126, 127})
FAILED_START_S = 10.0  # later than this, a job ran long enough to be worth its trace


def failed_to_start(code: int, seconds: float, records: int) -> bool:
    """Whether a job that exited with ``code`` after ``seconds``, having traced
    ``records`` records in all, failed to start (see the module's docstring)."""
    return code in NOT_STARTED_STATUSES and seconds < FAILED_START_S and records == 0


class Run:
    """One ``tfprof-agent run``: everything the launcher owns while the job runs.

    ``environ`` is the launcher's environment with the flags laid over it; the job
    inherits it (``config.child_environment``).
    """

    # Set up by execute() once the job is about to start.
    client: CollectorClient
    hub: RelayHub

    def __init__(
        self, cfg: AgentConfig, command: Sequence[str], environ: Mapping[str, str]
    ) -> None:
        self.cfg = cfg
        self.command = list(command)
        self.environ = environ
        # Checked in this order, before anything starts or prints: the command, then a
        # collector to talk to, then where the trace goes, then the source.
        check_command(command, environ)
        check_script(command)
        self._embedded_type = None if cfg.collector else _embedded_collector_type()
        self.job = cfg.job or default_job_name(command)
        self.output = cfg.output or f"tfprof-{self.job}.trace.json.gz"
        if self._embedded_type is not None:
            _embedded_module().check_output(self.output)
        self.run_id = os.urandom(6).hex()
        self.source = resolve_source(cfg)
        self.run_dir = tempfile.mkdtemp(prefix="tfprof-")
        self.embedded: EmbeddedCollector | None = None
        self._keep_run_dir = False  # the embedded store holds records not written out
        self._warned_collector = False
        self.spool: Spool | None = None

    # -- collector side -------------------------------------------------------------

    def _collector_failure(self, why: str) -> None:
        if not self._warned_collector:
            self._warned_collector = True
            if self.spool is not None:
                notice(
                    f"cannot deliver records to {self.cfg.collector} ({why}); they wait in "
                    f"{self.spool.root} until it answers"
                )
            else:
                notice(f"cannot deliver records to the embedded collector ({why})")

    def _connect(self) -> None:
        from tfprof.agent.relay.collector_client import CollectorClient
        from tfprof.agent.relay.hub import RelayHub

        if self.cfg.collector:
            from tfprof.agent.relay.spool import Spool

            self.client = CollectorClient.from_config(self.cfg)
            self.spool = Spool(self.cfg.spool_dir, self.cfg.spool_bytes)
        else:
            assert self._embedded_type is not None  # resolved in __init__ when no collector
            self.embedded = self._embedded_type(os.path.join(self.run_dir, "store"))
            self.client = CollectorClient(self.embedded.start())
        self.hub = RelayHub(
            self.cfg,
            self.client,
            self.spool,
            self.socket_path,
            lambda _hello: (self.job, self.run_id),  # the launcher names its job
            self._collector_failure,
        )
        if self.cfg.collector:
            self.hub.connect_remote(_flushed_notice)

    # -- the job --------------------------------------------------------------------

    @property
    def socket_path(self) -> str:
        return os.path.join(self.run_dir, "agent.sock")

    def child_env(self) -> dict[str, str]:
        # The job's Python may lack tfprof: its hook comes from a folder made here.
        try:
            bootstrap_dir, cupti_path = bundle.build(
                self.run_dir, with_cupti=self.source == "cupti"
            )
        except OSError as exc:
            notice(f"cannot write the bootstrap folder ({exc}); the job runs untraced")
            return dict(self.environ)
        return child_environment(
            self.environ,
            bootstrap_dir=bootstrap_dir,
            cupti_path=cupti_path,
            cupti_abi=interpreter_abi() if cupti_path else "",
            libcupti=self._nvtx_injection(),
            job=self.job,
            source=self.source,
            run_id=self.run_id,
            run_dir=self.run_dir,
            socket=self.socket_path,
        )

    def _nvtx_injection(self) -> str:
        """The libcupti NVTX should inject (ranges reach CUPTI only through it): none
        without CUPTI tracing, with NVTX off, or on a machine without a CUDA driver."""
        if self.source != "cupti" or not self.cfg.nvtx or not cuda_driver_present():
            return ""
        return libcupti_path()

    def _spawn(self, env: dict[str, str]) -> int:
        try:
            return os.posix_spawnp(
                self.command[0],
                self.command,
                env,
                setsigmask=(),
                setsigdef=(*FORWARDED_SIGNALS, signal.SIGPIPE),
            )
        except FileNotFoundError:
            raise CommandNotFound(f"command not found: {self.command[0]}") from None
        except PermissionError:
            raise CommandNotExecutable(f"permission denied: {self.command[0]}") from None

    def execute(self) -> int:
        if python_started_without_site(self.command):
            notice("python -S skips sitecustomize: that process cannot be traced")
        env = self.child_env()
        try:
            self._connect()
            self.hub.start()
            pid = self._spawn(env)
        except BaseException:
            self._abort()
            raise
        started = time.monotonic()
        forwarder = SignalForwarder(pid)
        forwarder.start()
        _, status = os.waitpid(pid, 0)
        forwarder.reaped.set()
        code = os.waitstatus_to_exitcode(status)
        try:
            self._finish(code, time.monotonic() - started, pid)
        except Exception as exc:  # the job's status matters more than our trace
            notice(f"failed to finish the trace ({type(exc).__name__}: {exc})")
            if self.embedded is not None and not self._keep_run_dir:
                self._keep_store()
        finally:
            if not self._keep_run_dir:
                shutil.rmtree(self.run_dir, ignore_errors=True)
        return code

    def _abort(self) -> None:
        """The job could not start: leave nothing behind."""
        if getattr(self, "hub", None) is not None:
            with contextlib.suppress(Exception):
                self.hub.stop()
        if getattr(self, "client", None) is not None:
            self.client.close()
        if self.embedded is not None:
            self.embedded.stop(grace=0)
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def _finish(self, code: int, seconds: float, pid: int = 0) -> None:
        # Processes deliver what they hold at exit within TFPROF_EXIT_TIMEOUT; a
        # grandchild the job left running is not waited for beyond that.
        still_running = not self.hub.relay.wait_closed(self.cfg.exit_timeout_s + 2.0)
        if still_running:
            notice("some traced processes are still running; their records so far are kept")
        self.hub.stop()
        if not still_running:
            # stop() takes the connections still waiting in the backlog (processes that
            # connected just before they ended, many forks at once): read them too, so
            # their hellos are among the links finished below.
            self.hub.relay.wait_closed(LATE_READERS_S)
        links = list(self.hub.relay.links)
        left = self.hub.finish_links(links, exit_code=code, child_pid=pid)
        if failed_to_start(code, seconds, _records_seen(links)):
            self.client.close()
            if self.embedded is not None:
                self.embedded.stop(grace=0)
            notice(
                f"the job failed to start: {os.path.basename(self.command[0])} exited with "
                f"status {code} after {seconds:.1f} s without tracing a record; nothing "
                "was written"
            )
            return
        records = sum(link.sender.spooled_records for link in left)
        if records and self.spool is not None:
            notice(
                f"{records:,} records of {len(left)} process(es) not delivered to "
                f"{self.cfg.collector} yet; they wait in {self.spool.root}: "
                "`tfprof-agent flush-spool` delivers them"
            )
        self.client.close()
        if self.embedded is not None:
            self.embedded.stop(grace=5.0)
            self._write_trace()
        else:
            self._report_remote(links, left)

    def _report_remote(self, links: list[ProcessLink], left: list[ProcessLink]) -> None:
        """Where the job went and how to get at it: nothing is written locally."""
        delivered = sum(link.sender.records_acked for link in links)
        dropped = sum(
            link.sender.dropped
            + link.dropped_queue
            + int((link.goodbye or {}).get("dropped_tracer", 0))
            for link in links
        )
        spooled = sum(link.sender.spooled_records for link in left)
        notice(
            f"job {self.job} (run {self.run_id}): {delivered:,} records delivered, "
            f"{spooled:,} spooled, {dropped:,} dropped"
        )
        # A failure to reach the collector was said once already, with its address.
        where = "HOST:PORT" if self._warned_collector else self.cfg.collector
        notice(
            f"`tfprof-collector export --collector {where} --job {self.job} -o "
            f"{self.job}.trace.json.gz` writes the trace here; on the collector's host, "
            f"`tfprof-collector summary --data-dir DIR --job {self.job}` summarises it"
        )

    def _write_trace(self) -> None:
        assert self.embedded is not None
        output = os.path.abspath(self.output)
        if not self.cfg.output:  # a name we chose never replaces a file: the next free one
            output = self.output = free_path(output)
        replaced = os.path.exists(output)
        try:
            summary = self.embedded.write_trace(output)
        except Exception as exc:  # disk full, directory gone: the records stay on disk
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            notice(f"cannot write the trace to {output} ({why})")
            self._keep_store()
            return
        sys.stderr.write(summary)
        again = " (replaced the file that was there)" if replaced else ""
        notice(f"trace written to {output}{again} (open in ui.perfetto.dev)")

    def _keep_store(self) -> None:
        """Keep the embedded store rather than delete records never written out."""
        assert self.embedded is not None
        self._keep_run_dir = True
        store = self.embedded.data_dir
        notice(
            f"the records are kept in {store}: `tfprof-collector export --data-dir {store} "
            f"-o {os.path.abspath(self.output)}` writes the trace again"
        )


def _records_seen(links: list[ProcessLink]) -> int:
    """Records any process of the job traced: delivered, spooled or lost on the way."""
    return sum(
        link.sender.records_acked
        + link.sender.spooled_records
        + link.sender.dropped
        + link.dropped_queue
        + int((link.goodbye or {}).get("dropped_tracer", 0))
        for link in links
    )


def _flushed_notice(records: int, streams: int) -> None:
    notice(f"delivered {records:,} spooled records of earlier runs ({streams} streams)")


def _embedded_module() -> ModuleType:
    # `from tfprof.collector import embedded`: the facade is the agent's only door in.
    try:
        from tfprof.collector import embedded
    except ImportError as exc:
        raise UsageError(
            f"no collector is installed here ({exc.name or exc}): name one with "
            "--collector HOST:PORT, or install tfprof-collector for the embedded one"
        ) from exc
    return embedded


def _embedded_collector_type() -> type[EmbeddedCollector]:
    collector_type: type[EmbeddedCollector] = _embedded_module().EmbeddedCollector
    return collector_type


def run(cfg: AgentConfig, command: Sequence[str], environ: Mapping[str, str]) -> int:
    """Run ``command`` traced; its exit status (negative: the signal that killed it)."""
    if not command:
        raise UsageError("no command to run: tfprof-agent run [options] [--] CMD [ARGS...]")
    clock.set_skew(cfg.clock_skew_ns)
    job_run = Run(cfg, command, environ)
    return job_run.execute()
