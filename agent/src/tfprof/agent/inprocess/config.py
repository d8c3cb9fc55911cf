"""The agent's settings: every option is a ``TFPROF_*`` environment variable.

Command-line flags of ``tfprof-agent run`` are laid over the launcher's environment
(``with_flags``); the launcher reads its configuration from that and hands the same
variables to the job (``child_environment``), so the launcher and every traced process
read one configuration. This is the only agent module that touches ``os.environ``.
Imported inside user processes: standard library only.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from typing import NamedTuple

from tfprof.agent.inprocess import identity
from tfprof.agent.inprocess.capture_control import ALWAYS_MODE, CaptureMode, parse_capture_mode
from tfprof.agent.inprocess.errors import ConfigError
from tfprof.agent.inprocess.options import OPTIONS, Option
from tfprof.core.names import RULE, is_safe_name

__all__ = ["OPTIONS", "AgentConfig", "Option", "load"]


# NVTX loads the library this names at its first call and hands it every range.
NVTX_INJECTION_VARIABLE = "NVTX_INJECTION64_PATH"
_SWITCH_VALUES = {
    "on": True, "1": True, "true": True, "yes": True,
    "off": False, "0": False, "false": False, "no": False,
}  # fmt: skip

# Where a job declares each process's rank, in order of precedence (after TF_CONFIG).
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")


class AgentConfig(NamedTuple):
    # A NamedTuple, not a dataclass: this is imported at start-up of every traced
    # process, and dataclasses pulls in inspect (bench/results/cpu-design-choices.txt).
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
    rank: str  # the rank the job declares for this process ("" when none)
    clock_skew_ns: int  # tests only, see TFPROF_TEST_CLOCK_SKEW_NS
    # The launcher's cupti-python (a folder to add to sys.path) and the ABI it needs.
    cupti_path: str = ""
    cupti_abi: str = ""
    # Host side of CUPTI tracing (see OPTIONS).
    api: bool = True
    nvtx: bool = True
    memory: bool = True
    torch_ops: bool = False
    nvtx_injection: str = ""  # what the launcher set NVTX_INJECTION64_PATH to
    # The scheduler's job, for processes no launcher named (see identity.scheduler_job).
    scheduler_job: str = ""
    scheduler_key: str = ""
    relay: str = "launcher"

    @property
    def via_daemon(self) -> bool:
        """Traced through a node daemon (``tfprof-agent env``), not a launcher."""
        return self.relay == "daemon"

    capture: CaptureMode = ALWAYS_MODE
    capture_finalize: bool = False  # detach CUPTI between capture windows
    tf_ops: bool = False  # record TensorFlow op names (tf_ops.py)
    replay_stretch: float = 1.0  # replay times multiplied by this (a straggler rank)
    steps: bool = True  # zero-code step markers (step_markers.py)
    tls_cert: str = ""  # client certificate and key (mTLS)
    tls_key: str = ""
    # --redact: option names masked in stored argv, and frame file paths that leave
    # the process as <redacted>
    redact: tuple[str, ...] = ()
    daemon_max_connections: int = 2048
    daemon_max_connections_per_uid: int = 512
    daemon_hello_timeout_s: float = 5.0
    daemon_root_may_join: bool = True
    code: str = "sample"  # off | sample | launch (stacks/code_capture.py)
    code_hz: float = 100.0
    code_launch_every: int = 8

    @property
    def replay_path(self) -> str | None:
        return self.source[len("replay:") :] if self.source.startswith("replay:") else None

    def task(self, pid: int) -> str:
        """The task id of process ``pid``: its declared rank, else the pid itself."""
        return self.rank or str(pid)


def validate_job_name(name: str) -> str:
    # The product's one naming rule (tfprof.core.names), reported as a setting error.
    if not is_safe_name(name):
        raise ConfigError(f"invalid job name {name!r}: {RULE}")
    return name


def validate_source(value: str) -> str:
    if value in ("auto", "cupti", "none"):
        return value
    if value.startswith("replay:") and len(value) > len("replay:"):
        return value
    raise ConfigError(f"TFPROF_SOURCE={value!r}: expected cupti, none, auto or replay:PATH")


def validate_relay(value: str) -> str:
    if value in ("launcher", "daemon"):
        return value
    raise ConfigError(f"TFPROF_RELAY={value!r}: expected launcher or daemon")


def validate_collector(value: str, label: str = "") -> str:
    """``value`` if it is ``HOST:PORT`` (``[IPv6]:PORT`` too), else ``ConfigError``
    naming ``label``: the flag the user typed, or the variable by default."""
    if not value:
        return value
    where = f"{label} {value}" if label else f"{OPTIONS['collector'].env}={value!r}"
    if "://" in value:
        raise ConfigError(f"{where}: give HOST:PORT without a scheme (the collector speaks gRPC)")
    host, sep, port = value.rpartition(":")
    if not sep or not host or any(c in host for c in "/ ") or not port.isdigit():
        raise ConfigError(f"{where}: expected HOST:PORT")
    if not 0 < int(port) < 65536:
        raise ConfigError(f"{where}: port {port} is out of range (1-65535)")
    return value


def quiet_grpc_logging() -> None:
    """Silence gRPC's C-core log lines (TLS handshake failures and the like) in the
    launcher, which shares its stderr with the job; our own lines say what failed.
    Call after the job's environment was copied and before grpc is imported: the job
    keeps its own GRPC_* settings."""
    os.environ["GRPC_VERBOSITY"] = "NONE"
    os.environ.pop("GRPC_TRACE", None)


def _switch(env: str, raw: str) -> bool:
    value = _SWITCH_VALUES.get(raw.lower())
    if value is None:
        raise ConfigError(f"{env}={raw!r}: expected on or off")
    return value


def nvtx_injection_path() -> str:
    """This process's NVTX_INJECTION64_PATH ("" when unset)."""
    return os.environ.get(NVTX_INJECTION_VARIABLE, "")


def set_nvtx_injection_path(path: str) -> None:
    """Point NVTX (at its first call in this process, and in children) at ``path``."""
    os.environ[NVTX_INJECTION_VARIABLE] = path


def _number(env: str, raw: str, kind: Callable[[str], float], minimum: float) -> float:
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
    """The configuration in ``environ`` (default: this process's environment)."""
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
    scheduler = identity.scheduler_job(env)
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
        rank=_rank(env, raw("rank")),
        clock_skew_ns=_skew(raw("test_clock_skew_ns")),
        cupti_path=raw("cupti_path"),
        cupti_abi=raw("cupti_abi"),
        api=_switch(OPTIONS["api"].env, raw("api")),
        nvtx=_switch(OPTIONS["nvtx"].env, raw("nvtx")),
        memory=_switch(OPTIONS["memory"].env, raw("memory")),
        torch_ops=_switch(OPTIONS["torch_ops"].env, raw("torch_ops")),
        nvtx_injection=raw("nvtx_injection"),
        scheduler_job=scheduler.name if scheduler else "",
        scheduler_key=scheduler.key if scheduler else "",
        relay=validate_relay(raw("relay")),
        capture=parse_capture_mode(raw("capture"), OPTIONS["capture"].env),
        capture_finalize=_flag(OPTIONS["capture_finalize"].env, raw("capture_finalize")),
        tf_ops=_switch(OPTIONS["tf_ops"].env, raw("tf_ops")),
        replay_stretch=_stretch(raw("replay_stretch")),
        steps=_switch(OPTIONS["steps"].env, raw("steps")),
        tls_cert=raw("tls_cert"),
        tls_key=raw("tls_key"),
        redact=tuple(p.strip() for p in raw("redact").split(",") if p.strip()),
        daemon_max_connections=int(_option_number("daemon_max_connections", raw, int, 1)),
        daemon_max_connections_per_uid=int(
            _option_number("daemon_max_connections_per_uid", raw, int, 1)
        ),
        daemon_hello_timeout_s=_option_number("daemon_hello_timeout", raw, float, 0.01),
        daemon_root_may_join=_switch(
            OPTIONS["daemon_root_may_join"].env, raw("daemon_root_may_join")
        ),
        code=validate_code(raw("code").lower()),
        code_hz=_number(OPTIONS["code_hz"].env, raw("code_hz"), float, 1.0),
        code_launch_every=int(
            _number(OPTIONS["code_launch_every"].env, raw("code_launch_every"), int, 1)
        ),
    )


def _option_number(
    key: str, raw: Callable[[str], str], kind: Callable[[str], float], minimum: float
) -> float:
    return _number(OPTIONS[key].env, raw(key), kind, minimum)


def validate_code(value: str) -> str:
    if value in ("off", "sample", "launch"):
        return value
    raise ConfigError(f"{OPTIONS['code'].env}={value!r}: expected off, sample or launch")


def _flag(env: str, raw: str) -> bool:
    value = raw.lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise ConfigError(f"{env}={raw!r}: expected 1 or 0 (true or false)")


def _skew(raw: str) -> int:
    try:
        return int(raw or 0)
    except ValueError:
        return 0


def _stretch(raw: str) -> float:
    env = OPTIONS["replay_stretch"].env
    value = _number(env, raw, float, 0)
    if value <= 0 or value > 1000:
        raise ConfigError(f"{env}={raw!r}: expected a factor above 0 and at most 1000")
    return value


def _rank(environ: Mapping[str, str], own: str = "") -> str:
    """The rank of this process: ``TFPROF_RANK`` (``own``), else the one the job declares
    (TF_CONFIG's task, then ``RANK_VARIABLES``), else ""."""
    if own:
        if not own.isdigit():
            raise ConfigError(f"{OPTIONS['rank'].env}={own!r}: expected a rank (0, 1, 2...)")
        return str(int(own))
    tf_config = environ.get("TF_CONFIG")
    if tf_config:
        import json  # only jobs that set TF_CONFIG pay for it

        try:
            task = json.loads(tf_config).get("task", {})
            if "index" in task:
                kind = str(task.get("type", "worker"))
                index = int(task["index"])  # validates the worker's index too
                return f"{kind}{index}" if kind != "worker" else str(index)
        except (ValueError, AttributeError, TypeError):
            pass
    for var in RANK_VARIABLES:
        value = environ.get(var, "")
        if value.isdigit():
            return value
    return ""


def export_identity(job: str, run_id: str) -> None:
    """Hand this process's job and run id down to the processes it starts (through a
    node daemon, the first traced process of a job names it)."""
    os.environ.setdefault(OPTIONS["job"].env, job)
    os.environ.setdefault(OPTIONS["run_id"].env, run_id)


def with_flags(
    flags: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``environ`` (default: this process's) with flag values, keyed like ``OPTIONS``,
    set as their variables: what the launcher reads and what its job inherits."""
    env = dict(os.environ if environ is None else environ)
    env.update((OPTIONS[key].env, value) for key, value in flags.items())
    return env


def child_environment(
    environ: Mapping[str, str],
    *,
    bootstrap_dir: str,
    job: str,
    source: str,
    run_id: str,
    run_dir: str,
    socket: str,
    cupti_path: str = "",
    cupti_abi: str = "",
    libcupti: str = "",
) -> dict[str, str]:
    """The job's environment: ``environ`` with the bootstrap first on ``PYTHONPATH`` and
    what the launcher decided (job name, resolved source, its socket, its cupti-python
    for interpreters without one) for every hook; with ``libcupti``, NVTX is pointed at
    it (``nvtx_environment``)."""
    env = dict(environ)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = bootstrap_dir + (os.pathsep + path if path else "")
    for key, value in (
        ("job", job),
        ("source", source),
        ("run_id", run_id),
        ("run_dir", run_dir),
        ("socket", socket),
        ("cupti_path", cupti_path),
        ("cupti_abi", cupti_abi),
    ):
        env[OPTIONS[key].env] = value
    env.update(nvtx_environment(env, libcupti))
    return env


def nvtx_environment(environ: Mapping[str, str], libcupti: str) -> dict[str, str]:
    """The variables that make NVTX hand its ranges to CUPTI: NVTX_INJECTION64_PATH at
    ``libcupti`` (cupti-python's) and a note of it for the hook. Nothing when there is
    no libcupti, when NVTX tracing is off, or when the user set their own injection."""
    if not libcupti or environ.get(NVTX_INJECTION_VARIABLE):
        return {}
    nvtx = OPTIONS["nvtx"]
    if not _SWITCH_VALUES.get(environ.get(nvtx.env, nvtx.default).strip().lower(), True):
        return {}
    return {NVTX_INJECTION_VARIABLE: libcupti, OPTIONS["nvtx_injection"].env: libcupti}
