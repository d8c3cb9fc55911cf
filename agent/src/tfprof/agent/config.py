"""The agent's settings: every option is a ``TFPROF_*`` environment variable.

Command-line flags of ``tfprof-agent run`` only set these variables, so the launcher and
every traced process (which inherits the environment) read one configuration, here and
nowhere else. Imported inside user processes: standard library only.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import NamedTuple


class Option(NamedTuple):
    env: str
    default: str
    doc: str


OPTIONS: dict[str, Option] = {
    "collector": Option(
        "TFPROF_COLLECTOR", "", "HOST:PORT of a tfprof collector; empty runs one embedded"
    ),
    "job": Option("TFPROF_JOB", "", "job name; default: the command's name and a timestamp"),
    "output": Option(
        "TFPROF_OUTPUT", "", "embedded mode's trace file, .json or .json.gz (Chrome trace format)"
    ),
    "source": Option(
        "TFPROF_SOURCE",
        "auto",
        "cupti | replay:PATH | none | auto (cupti when a CUDA driver is present)",
    ),
    "replay_speed": Option(
        "TFPROF_REPLAY_SPEED", "1.0", "replay pace: 1.0 = as recorded, 2 = twice as fast, max"
    ),
    "replay_repeat": Option("TFPROF_REPLAY_REPEAT", "1", "replay the trace N times back to back"),
    "host_metrics_interval": Option(
        "TFPROF_HOST_METRICS_INTERVAL", "500", "ms between host samples of each process; 0 = off"
    ),
    "queue_bytes": Option(
        "TFPROF_QUEUE_BYTES", str(64 << 20), "bytes of records a process may hold unsent"
    ),
    "exit_timeout": Option(
        "TFPROF_EXIT_TIMEOUT", "10", "seconds a process may spend at exit delivering records"
    ),
    "cupti_buffer_bytes": Option("TFPROF_CUPTI_BUFFER_BYTES", str(8 << 20), "CUPTI buffer size"),
    "cupti_flush_ms": Option(
        "TFPROF_CUPTI_FLUSH_MS",
        "1000",
        "ms between CUPTI's periodic flushes, so records stream while the job runs; 0 = "
        "only when a buffer fills and at exit",
    ),
    "log_level": Option("TFPROF_LOG_LEVEL", "WARNING", "log level of the tfprof loggers"),
    "spool_dir": Option(
        "TFPROF_SPOOL_DIR", "", "where undelivered batches wait (default: ~/.cache/tfprof/spool)"
    ),
    "spool_bytes": Option(
        "TFPROF_SPOOL_BYTES", str(1 << 30), "disk the spool may use; beyond it, drop and count"
    ),
    "delivery_timeout": Option(
        "TFPROF_DELIVERY_TIMEOUT",
        "10",
        "seconds the launcher keeps trying the collector after the job ends, then spools",
    ),
    "clock_interval": Option(
        "TFPROF_CLOCK_INTERVAL", "60", "seconds between clock-offset estimates; 0 = once"
    ),
    "tls_ca": Option(
        "TFPROF_TLS_CA", "", "PEM file of the CA that signed the collector's certificate (TLS)"
    ),
    "auth_token": Option("TFPROF_AUTH_TOKEN", "", "bearer token the collector requires"),
    # Set by the launcher for the job's processes, not by users.
    "socket": Option("TFPROF_SOCKET", "", "(internal) the launcher's Unix socket"),
    "run_id": Option("TFPROF_RUN_ID", "", "(internal) this run's id"),
    "run_dir": Option("TFPROF_RUN_DIR", "", "(internal) the launcher's scratch directory"),
}

JOB_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class ConfigError(ValueError):
    """A setting has a value we cannot use; the message names the variable."""


class AgentConfig(NamedTuple):
    # A NamedTuple, not a dataclass: this is imported at start-up of every traced
    # process, and dataclasses pulls in inspect (~10 ms).
    collector: str
    job: str
    output: str
    source: str  # "auto", "cupti", "none" or "replay:<path>"
    replay_speed: float | None  # None = as fast as possible
    replay_repeat: int
    host_metrics_interval_ms: int
    queue_bytes: int
    exit_timeout_s: float
    cupti_buffer_bytes: int
    cupti_flush_ms: int
    log_level: str
    spool_dir: str
    spool_bytes: int
    delivery_timeout_s: float
    clock_interval_s: float
    tls_ca: str
    auth_token: str
    socket: str
    run_id: str
    run_dir: str

    @property
    def replay_path(self) -> str | None:
        return self.source[len("replay:") :] if self.source.startswith("replay:") else None


def validate_job_name(name: str) -> str:
    if not JOB_NAME_RE.fullmatch(name):  # fullmatch: `$` alone accepts a trailing "\n"
        raise ConfigError(
            f"invalid job name {name!r}: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def validate_source(value: str) -> str:
    if value in ("auto", "cupti", "none"):
        return value
    if value.startswith("replay:") and len(value) > len("replay:"):
        return value
    raise ConfigError(f"TFPROF_SOURCE={value!r}: expected cupti, none, auto or replay:PATH")


def validate_collector(value: str) -> str:
    if not value:
        return value
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"TFPROF_COLLECTOR={value!r}: expected HOST:PORT")
    return value


def _number(env: str, raw: str, kind: type, minimum: float) -> float:
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{env}={raw!r}: expected a number") from None
    if not math.isfinite(value):  # nan slips past `<`; inf overflows timeouts
        raise ConfigError(f"{env}={raw!r}: expected a finite number")
    if value < minimum:
        raise ConfigError(f"{env}={raw!r}: must be at least {minimum}")
    return float(value)


def load(environ: Mapping[str, str] | None = None) -> AgentConfig:
    env = os.environ if environ is None else environ

    def raw(key: str) -> str:
        opt = OPTIONS[key]
        return env.get(opt.env, opt.default).strip()

    speed_raw = raw("replay_speed").lower()
    speed = (
        None if speed_raw == "max" else _number(OPTIONS["replay_speed"].env, speed_raw, float, 1e-6)
    )
    job = raw("job")
    if job:
        validate_job_name(job)
    return AgentConfig(
        collector=validate_collector(raw("collector")),
        job=job,
        output=raw("output"),
        source=validate_source(raw("source")),
        replay_speed=speed,
        replay_repeat=int(_number(OPTIONS["replay_repeat"].env, raw("replay_repeat"), int, 1)),
        host_metrics_interval_ms=int(
            _number(OPTIONS["host_metrics_interval"].env, raw("host_metrics_interval"), int, 0)
        ),
        queue_bytes=int(_number(OPTIONS["queue_bytes"].env, raw("queue_bytes"), int, 1 << 16)),
        exit_timeout_s=_number(OPTIONS["exit_timeout"].env, raw("exit_timeout"), float, 0),
        cupti_buffer_bytes=int(
            _number(OPTIONS["cupti_buffer_bytes"].env, raw("cupti_buffer_bytes"), int, 1 << 16)
        ),
        cupti_flush_ms=int(_number(OPTIONS["cupti_flush_ms"].env, raw("cupti_flush_ms"), int, 0)),
        log_level=raw("log_level").upper() or "WARNING",
        spool_dir=raw("spool_dir")
        or os.path.join(
            env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
            "tfprof",
            "spool",
        ),
        spool_bytes=int(_number(OPTIONS["spool_bytes"].env, raw("spool_bytes"), int, 0)),
        delivery_timeout_s=_number(
            OPTIONS["delivery_timeout"].env, raw("delivery_timeout"), float, 0
        ),
        clock_interval_s=_number(OPTIONS["clock_interval"].env, raw("clock_interval"), float, 0),
        tls_ca=raw("tls_ca"),
        auth_token=raw("auth_token"),
        socket=raw("socket"),
        run_id=raw("run_id"),
        run_dir=raw("run_dir"),
    )


def task_from_env(environ: Mapping[str, str], pid: int) -> str:
    """The task id: the rank when the job declares one, else the pid."""
    tf_config = environ.get("TF_CONFIG")
    if tf_config:
        import json

        try:
            task = json.loads(tf_config).get("task", {})
            if "index" in task:
                kind = str(task.get("type", "worker"))
                index = int(task["index"])  # validates the worker's index too
                return f"{kind}{index}" if kind != "worker" else str(index)
        except (ValueError, AttributeError, TypeError):
            pass
    for var in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        value = environ.get(var, "")
        if value.isdigit():
            return value
    return str(pid)
