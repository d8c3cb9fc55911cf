"""The in-process hook: runs inside every traced Python process.

Started by the bootstrap ``sitecustomize`` before user code. It arms one tracer source,
queues the source's record frames (bounded; when full it drops and counts instead of
blocking) and sends them from a daemon thread over the launcher's Unix socket. It never
raises into user code: every failure becomes one ``tfprof:`` line on stderr and the
process carries on untraced. Standard library only, until a source needs more.

If the launcher dies (SIGKILL), the job keeps running: the send to its socket fails,
the hook says so once, drops what it still holds and what the source traces from then
on, counts all of it (``undelivered``, ``dropped_queue``) and prints the count at exit,
since no launcher is left to carry it to the collector.

This module is the process-global entry: ``start``, the fork and exit handlers and the
post-import routes (PyTorch ops, training steps). The per-process state is
``process_hook.Hook``, its sending half ``launcher_link``, the choice of source and
identity ``source_arming``, the queue ``frame_queue``, the stderr lines ``notices``.
"""

from __future__ import annotations

import atexit
import os
import threading

from tfprof.agent.inprocess import clock, config, notices, tf_ops
from tfprof.agent.inprocess.errors import ConfigError
from tfprof.agent.inprocess.notices import warn
from tfprof.agent.inprocess.process_hook import Hook
from tfprof.agent.inprocess.source_arming import job_identity, pick_source

_hook: Hook | None = None


def _after_fork_child() -> None:
    global _hook
    notices.reset_after_fork()  # another thread may have held it at fork time
    try:
        if _hook is not None:
            _hook = _hook.after_fork_child()
            _register_multiprocessing_finalizer()
    except Exception as exc:
        warn(f"could not trace a forked child ({type(exc).__name__}: {exc})")


def _register_multiprocessing_finalizer() -> None:
    # multiprocessing's fork workers leave through os._exit(), which skips atexit, and
    # clear multiprocessing's own finalizers on start; threading's exit hooks still run
    # (BaseProcess._bootstrap calls threading._shutdown), so deliver from there.
    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        try:
            register(_shutdown)
        except RuntimeError:  # interpreter already shutting down
            pass


def _shutdown() -> None:
    try:
        if _hook is not None and _hook.pid == os.getpid():
            _hook.shutdown()
    except Exception as exc:
        warn(f"failed at exit ({type(exc).__name__}: {exc})")


def _watch_torch() -> None:
    try:
        from tfprof.agent.inprocess import torch_ops

        torch_ops.install(warn)
    except Exception as exc:
        warn(f"could not watch for PyTorch ({type(exc).__name__}: {exc})")


def _step_boundary(t_ns: int) -> None:
    hook = _hook  # the current process's (a forked child has its own)
    if hook is not None:
        hook.step_boundary(t_ns)


def _add_step(number: int, start_ns: int, end_ns: int, thread: int, marker: str) -> None:
    hook = _hook
    if hook is not None:
        hook.add_step(number, start_ns, end_ns, thread, marker)


def _mark_steps() -> None:
    try:
        from tfprof.agent.inprocess import step_markers

        step_markers.install(_step_boundary, _add_step, warn)
    except Exception as exc:
        warn(f"cannot mark training steps ({type(exc).__name__}: {exc})")


def start() -> None:
    """Entry point for the bootstrap; safe to call twice, never raises."""
    global _hook
    if _hook is not None:
        return
    try:
        cfg = config.load()
    except ConfigError as exc:
        warn(f"{exc}; this process is not traced")
        return
    if not cfg.socket:
        return  # not started by tfprof-agent run
    clock.set_skew(cfg.clock_skew_ns)
    job = job_identity(cfg)
    try:
        source = pick_source(cfg, job[1])
    except Exception as exc:
        warn(f"cannot set up the tracer source ({type(exc).__name__}: {exc})")
        source = None
    _hook = Hook(cfg, source, job)
    _hook.start()
    if cfg.torch_ops and cfg.nvtx and _hook.source is not None and cfg.source == "cupti":
        _watch_torch()
    if cfg.tf_ops:
        tf_ops.install(_hook, cfg.run_dir)
    if cfg.steps:
        _mark_steps()
    atexit.register(_shutdown)
    os.register_at_fork(after_in_child=_after_fork_child)
