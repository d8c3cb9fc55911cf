"""Arming the hook: the job identity it reports and the one tracer source it starts.

A replay runs once per job (or rank): the first process to claim it replays, every rank
from the run's one origin.
"""

from __future__ import annotations

import contextlib
import os

from tfprof.agent.inprocess import clock, config, identity
from tfprof.agent.inprocess.launcher_link import process_argv
from tfprof.agent.inprocess.sources.base import Source


def job_identity(cfg: config.AgentConfig) -> tuple[str, str]:
    """(job name, run id): the launcher's, else worked out here (identity.resolve)."""
    if not cfg.via_daemon:
        return cfg.job, cfg.run_id
    scheduler = (
        identity.SchedulerJob(cfg.scheduler_job, cfg.scheduler_key) if cfg.scheduler_key else None
    )
    job, run_id = identity.resolve(cfg.job, cfg.run_id, scheduler, process_argv())
    config.export_identity(job, run_id)  # children (torchrun's ranks) join this run
    return job, run_id


def pick_source(cfg: config.AgentConfig, run_id: str = "") -> Source | None:
    if cfg.source in ("none", "auto"):
        # The launcher resolves "auto" before starting the job; keep the job safe anyway.
        return None
    if cfg.source == "cupti":
        from tfprof.agent.inprocess.sources.cupti import CuptiSource

        return CuptiSource(
            buffer_bytes=cfg.cupti_buffer_bytes,
            flush_period_ms=cfg.cupti_flush_ms,
            launcher_cupti=(cfg.cupti_path, cfg.cupti_abi),
            api=cfg.api,
            markers=cfg.nvtx,
            memory=cfg.memory,
            launcher_nvtx=cfg.nvtx_injection,
            finalize_after_window=cfg.capture_finalize,
        )
    path = cfg.replay_path
    if path is not None:
        # Replay runs once per job, in the first traced process to claim it; or, in a
        # process that has a rank, once per rank, every rank from the run's one origin.
        if not cfg.via_daemon:
            folder, prefix = cfg.run_dir or os.path.dirname(cfg.socket), "replay"
        else:  # through a node daemon: once per run, on this host
            import tempfile

            folder, prefix = tempfile.gettempdir(), f"tfprof-replay-{run_id}"
        rank = f".rank-{cfg.rank}" if cfg.rank else ""
        if not claim(os.path.join(folder, f"{prefix}{rank}.claimed")):
            return None
        origin = run_origin(os.path.join(folder, f"{prefix}.origin")) if cfg.rank else None
        from tfprof.agent.inprocess.sources.replay import ReplaySource

        return ReplaySource(
            path,
            speed=cfg.replay_speed,
            repeat=cfg.replay_repeat,
            stretch=cfg.replay_stretch,
            origin_ns=origin,
        )
    return None


def claim(path: str) -> bool:
    """Whether this process is the first to create ``path`` (it then holds its pid)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return False
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


def run_origin(path: str) -> int:
    """The replay origin every rank of the run shares: the first rank to ask writes its
    present instant to ``path`` (whole, then linked into place, so no rank reads half of
    it); the others read it."""
    mine = clock.now_ns()
    draft = f"{path}.{os.getpid()}"
    try:
        with open(draft, "w") as f:
            f.write(str(mine))
        try:
            os.link(draft, path)
        except FileExistsError:
            pass
    finally:
        with contextlib.suppress(OSError):
            os.unlink(draft)
    with open(path) as f:
        return int(f.read().strip())
