"""Classic TensorFlow op names without a code change: TensorFlow's own host tracer.

TensorFlow's graph executor and eager runtime mark every op they run (TraceMe), but
only a profiler session collects the marks. When the job imports ``tensorflow``
(``post_import``), the hook starts one with the host tracer alone (level 2: every op;
device tracer off, since CUPTI is tfprof's; Python tracer off), and a daemon thread
drains it every ``DRAIN_PERIOD_S`` (export the XSpace, start a new session) and once
more at exit, so memory stays bounded on long jobs. Each op becomes a MARKER row of
category ``tf_op`` on its host thread (``tf_ops_xspace``, ``tf_ops_threads``), sent
through the hook like any source's records. A job that never imports TensorFlow pays
nothing.

The user's own profiling comes first: ``tf.profiler.experimental.start``/``stop`` (what
Keras' TensorBoard callback and ``tf.profiler.experimental.Profile`` call) are wrapped
so that ours is drained and paused while theirs runs, and resumed after. A session
started some other way (a profiler server's capture) makes our restart fail: one line,
and we try again at the next drain. Every failure is one ``tfprof:`` line; the job and
its import of TensorFlow carry on. Standard library only at import time: TensorFlow's
modules (and protobuf) are imported inside the callbacks, in a process that has them,
and so is what only a running tracer needs (tempfile, shutil): the hook's start-up stays
light.
"""

from __future__ import annotations

import array
import os
import sys
import threading
import time
from types import ModuleType
from typing import Any

from tfprof.agent.inprocess import clock, post_import
from tfprof.agent.inprocess.sources.base import Sink
from tfprof.core.records import RecordKind, RecordTable

TENSORFLOW = "tensorflow"
CATEGORY = "tf_op"
DRAIN_PERIOD_S = 5.0
SESSION_OPTIONS = {"host_tracer_level": 1, "python_tracer_level": 0, "device_tracer_level": 0}
# Where TensorFlow releases keep xplane_pb2, newest first.
XPLANE_MODULES = (
    "tensorflow.tsl.profiler.protobuf.xplane_pb2",
    "tsl.profiler.protobuf.xplane_pb2",
    "tensorflow.core.profiler.protobuf.xplane_pb2",
)
# Modules that re-export profiler_v2.start/stop as tf.profiler.experimental.*.
_USER_API_MODULES = (
    "tensorflow.python.profiler.profiler_v2",
    "tensorflow._api.v2.profiler.experimental",
    "tensorflow._api.v2.compat.v2.profiler.experimental",
)


def _xplane_module() -> Any:
    import importlib

    for name in XPLANE_MODULES:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("no xplane_pb2 in this TensorFlow")


class TfOpsTracer:
    """One TensorFlow profiler session at a time, drained into the sink."""

    def __init__(
        self,
        sink: Sink,
        *,
        drain_period_s: float | None = None,
        scratch_parent: str | None = None,
    ) -> None:
        self.sink = sink
        self.drain_period_s = DRAIN_PERIOD_S if drain_period_s is None else drain_period_s
        self.scratch_parent = scratch_parent
        self.records = 0  # op rows handed to the sink
        self.drains = 0
        self.gap_ns = 0  # time no session was recording, between drains
        self._pid = os.getpid()
        self._lock = threading.Lock()  # one session operation at a time
        self._wake = threading.Event()
        self._session: Any = None
        self._session_start_ns = 0
        self._paused = False  # the user's own profiler session runs
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._scratch = ""
        self._pywrap: Any = None
        self._xplane: Any = None
        from tfprof.agent.inprocess.tf_ops_threads import ThreadResolver

        self._threads = ThreadResolver()
        self._names: dict[str, int] = {}
        self._category = 0
        # Records carry the hook's clock (realtime plus the tests-only skew).
        self._clock_offset_ns = clock.now_ns() - time.time_ns()

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> bool:
        """Start the first session and the drain thread; False (said once) if it cannot."""
        import shutil
        import tempfile

        from tensorflow.python.profiler.internal import _pywrap_profiler

        self._pywrap = _pywrap_profiler
        self._xplane = _xplane_module()
        self._category = self.sink.intern(CATEGORY)
        self._scratch = tempfile.mkdtemp(prefix="tfprof-tf-ops-", dir=self.scratch_parent)
        with self._lock:
            error = self._start_session()
        if error is not None:
            self.sink.warn(
                f"TensorFlow's profiler is in use ({error}): TensorFlow op names are not "
                "recorded in this process"
            )
            shutil.rmtree(self._scratch, ignore_errors=True)
            return False
        _wrap_user_profiler(self)
        self._thread = threading.Thread(target=self._drain_loop, name="tfprof-tf-ops", daemon=True)
        self._thread.start()
        return True

    def stop(self, deadline: float) -> None:
        """Drain what the session holds and end it (at exit)."""
        if self._stopped or os.getpid() != self._pid:
            return
        self._stopped = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        self._drain(restart=False)
        import shutil

        shutil.rmtree(self._scratch, ignore_errors=True)

    def pause(self) -> None:
        """The user starts TensorFlow's profiler: hand it the (single) session slot."""
        with self._lock:
            self._paused = True
        self._drain(restart=False)

    def resume(self) -> None:
        """The user's session ended: record again."""
        with self._lock:
            self._paused = False
            if not self._stopped and self._session is None:
                self._start_session()

    # -- sessions -------------------------------------------------------------------

    def _start_session(self) -> str | None:
        """Under ``_lock``: a new session, or why not."""
        session = self._pywrap.ProfilerSession()
        start_ns = time.time_ns()
        try:
            session.start(self._scratch, dict(SESSION_OPTIONS))
        except Exception as exc:  # AlreadyExistsError: someone else's session runs
            return f"{type(exc).__name__}: {exc}".rstrip(": ")
        self._session, self._session_start_ns = session, start_ns
        return None

    def _collect(self, restart: bool) -> list[bytes]:
        """Under ``_lock``: end the session, read its XSpace files, start the next one."""
        session, self._session = self._session, None
        if session is None:
            return []
        stopped_ns = time.time_ns()
        session.export_to_tb()  # writes <scratch>/plugins/profile/<time>/<host>.xplane.pb
        blobs: list[bytes] = []
        for folder, _, files in os.walk(self._scratch):
            for name in files:
                path = os.path.join(folder, name)
                if name.endswith(".xplane.pb"):
                    with open(path, "rb") as f:
                        blobs.append(f.read())
                os.unlink(path)
        if restart and not self._paused and not self._stopped:
            error = self._start_session()
            if error is not None:
                self.sink.warn(
                    f"TensorFlow's profiler is in use ({error}): TensorFlow op names are "
                    "not recorded while it is"
                )
            else:
                self.gap_ns += self._session_start_ns - stopped_ns
        return blobs

    def _drain_loop(self) -> None:
        while not self._wake.wait(self.drain_period_s):
            try:
                with self._lock:
                    if self._session is None and not self._paused and not self._stopped:
                        self._start_session()  # retry after someone else's session
                self._drain(restart=True)
            except Exception as exc:  # a bug of ours must not reach the job
                self.sink.warn(f"TensorFlow op tracing stopped ({type(exc).__name__}: {exc})")
                return

    def _drain(self, restart: bool) -> None:
        from tfprof.agent.inprocess.tf_ops_xspace import op_events

        with self._lock:
            session_start_ns = self._session_start_ns
            blobs = self._collect(restart)
        for blob in blobs:
            space = self._xplane.XSpace()
            space.ParseFromString(blob)
            self._submit(op_events(space, session_start_ns))
        self.drains += 1

    # -- records --------------------------------------------------------------------

    def _submit(self, events: Any) -> None:
        n = len(events.names)
        if n == 0:
            return
        intern, names = self.sink.intern, self._names
        name_ids = array.array("q", bytes(8 * n))
        for i, name in enumerate(events.names):
            index = names.get(name)
            if index is None:
                index = names[name] = intern(name)
            name_ids[i] = index
        tids = self._threads.resolve(events.lines)
        offset = self._clock_offset_ns
        table = RecordTable.from_columns(
            {
                "kind": array.array("q", [RecordKind.MARKER]) * n,
                "start_ns": array.array("q", [t + offset for t in events.starts_ns]),
                "duration_ns": array.array("q", events.durations_ns),
                "name": name_ids,
                "thread": array.array("q", [tids[line] for line in events.lines]),
                "category": array.array("q", [self._category]) * n,
            },
            n,
        )
        self.sink.submit(table)  # never waits: a full queue drops and counts
        self.records += n


def _wrap_user_profiler(tracer: TfOpsTracer) -> None:
    """Make ``tf.profiler.experimental.start``/``stop`` pause and resume ours."""
    import functools

    from tensorflow.python.profiler import profiler_v2

    user_start, user_stop = profiler_v2.start, profiler_v2.stop

    @functools.wraps(user_start)
    def start(*args: Any, **kwargs: Any) -> Any:
        tracer.pause()
        try:
            return user_start(*args, **kwargs)
        except BaseException:
            tracer.resume()
            raise

    @functools.wraps(user_stop)
    def stop(*args: Any, **kwargs: Any) -> Any:
        try:
            return user_stop(*args, **kwargs)
        finally:
            tracer.resume()

    for name in _USER_API_MODULES:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "start", None) is user_start:
            module.start = start  # type: ignore[attr-defined]
            module.stop = stop  # type: ignore[attr-defined]


_tracer: TfOpsTracer | None = None


def install(sink: Sink, scratch_parent: str | None = None) -> None:
    """Trace TensorFlow's ops once the job imports it (at once if it already has)."""

    def on_import(tensorflow: ModuleType) -> None:
        global _tracer
        tracer = TfOpsTracer(sink, scratch_parent=scratch_parent or None)
        try:
            if tracer.start():
                _tracer = tracer
        except Exception as exc:
            version = getattr(tensorflow, "__version__", "unknown version")
            sink.warn(
                f"cannot record TensorFlow op names (tensorflow {version}: "
                f"{type(exc).__name__}: {exc})"
            )

    post_import.when_imported(TENSORFLOW, on_import)


def stop(deadline: float) -> None:
    """At exit: the last drain of this process's tracer, if one runs."""
    tracer = _tracer
    if tracer is None:
        return
    try:
        tracer.stop(deadline)
    except Exception as exc:
        tracer.sink.warn(f"TensorFlow op names: last drain failed ({type(exc).__name__}: {exc})")
