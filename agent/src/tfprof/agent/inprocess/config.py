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
from tfprof.core.names import RULE, is_safe_name


class Option(NamedTuple):
    env: str
    default: str
    doc: str


OPTIONS: dict[str, Option] = {
    "collector": Option(
        "TFPROF_COLLECTOR", "", "HOST:PORT of a tfprof collector; empty runs one embedded"
    ),
    "job": Option("TFPROF_JOB", "", "job name: 1-64 of A-Z a-z 0-9 . _ -"),
    "output": Option(
        "TFPROF_OUTPUT",
        "",
        "embedded mode's trace file; its suffix picks the format: .json.gz, .json (Chrome), "
        ".pftrace, .perfetto-trace (Perfetto), .xplane.pb (XPlane; an existing directory "
        "too), .pbtxt, .pb (StepStats); an existing file is replaced",
    ),
    "source": Option(
        "TFPROF_SOURCE",
        "auto",
        "cupti | replay:PATH | none | auto (cupti when a CUDA driver is present)",
    ),
    "replay_speed": Option(
        "TFPROF_REPLAY_SPEED",
        "1.0",
        "replay pace: 1.0 = as recorded, 2 = twice as fast, max = as fast as possible"
        " (with N repeats, max compresses time N-fold)",
    ),
    "replay_repeat": Option("TFPROF_REPLAY_REPEAT", "1", "replay the trace N times back to back"),
    "replay_stretch": Option(
        "TFPROF_REPLAY_STRETCH",
        "1.0",
        "multiply a replay's times (starts from the run's replay origin, and durations) by "
        "this factor: a rank replayed with 1.3 is a straggler",
    ),
    "rank": Option(
        "TFPROF_RANK",
        "",
        "this process's rank (a number), over RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, "
        "SLURM_PROCID and TF_CONFIG's task; a replay runs once per rank of a run",
    ),
    "steps": Option(
        "TFPROF_STEPS",
        "on",
        "record each training step with no code change: PyTorch's optimizer steps "
        "(torch >= 2.0) and Keras train-function calls, when the job imports them",
    ),
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
    # The host side of CUPTI tracing (docs/concepts/host-side.md): on/off switches.
    "api": Option(
        "TFPROF_API",
        "on",
        "record CUDA runtime and driver API calls (launches, copies, memsets, "
        "synchronisation, allocation and free; getters left out) on host thread tracks",
    ),
    "nvtx": Option(
        "TFPROF_NVTX",
        "on",
        "record NVTX ranges (CUPTI markers; NVTX_INJECTION64_PATH is set to cupti-python's "
        "libcupti unless already set)",
    ),
    "memory": Option(
        "TFPROF_MEMORY", "on", "record device memory allocations and frees (CUPTI MEMORY2)"
    ),
    "torch_ops": Option(
        "TFPROF_TORCH_OPS",
        "off",
        "when the job imports torch, turn on PyTorch's NVTX op ranges (what "
        "torch.autograd.profiler.emit_nvtx does); needs nvtx on",
    ),
    "capture": Option(
        "TFPROF_CAPTURE",
        "always",
        "when to trace: always (from process start), on-demand (armed, activities off "
        "until a collector opens a capture window) or periodic:ON/EVERY (a window of ON "
        "every EVERY, e.g. periodic:2s/60s)",
    ),
    "capture_finalize": Option(
        "TFPROF_CAPTURE_FINALIZE",
        "0",
        "1: detach CUPTI (cupti finalize) after each capture window, so nothing of it "
        "lingers between windows; the next window attaches it again",
    ),
    "log_level": Option("TFPROF_LOG_LEVEL", "WARNING", "log level of the tfprof loggers"),
    "tf_ops": Option(
        "TFPROF_TF_OPS",
        "off",
        "on | off: when the job imports tensorflow, record its op names (TensorFlow's own "
        "host tracer, device tracer off) as host ranges on their threads; off by default: "
        "it slowed an op-dense CPU job by about 20 %",
    ),
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
    "relay": Option(
        "TFPROF_RELAY",
        "launcher",
        "who relays this process's records: launcher (tfprof-agent run) or daemon (a node "
        "daemon; set by tfprof-agent env)",
    ),
    # Job identity without a launcher (identity.py); Kubernetes maps them in with the
    # downward API. POD_NAME / POD_NAMESPACE are read too.
    "pod_name": Option("TFPROF_POD_NAME", "", "Kubernetes pod name: names the job (daemon)"),
    "pod_namespace": Option(
        "TFPROF_POD_NAMESPACE", "", "Kubernetes namespace of the pod: names the job (daemon)"
    ),
    "cupti_path": Option(
        "TFPROF_CUPTI_PATH", "", "(internal) the launcher's cupti-python, for jobs without one"
    ),
    "cupti_abi": Option(
        "TFPROF_CUPTI_ABI", "", "(internal) the interpreter ABI that cupti-python is built for"
    ),
    "nvtx_injection": Option(
        "TFPROF_NVTX_INJECTION",
        "",
        "(internal) the NVTX_INJECTION64_PATH the launcher set, which the hook may correct",
    ),
    # Tests only: pretend this host's clock is off by that much, so tests can show that
    # merge aligns hosts through the estimated offset. Not a number: no skew.
    "test_clock_skew_ns": Option(
        "TFPROF_TEST_CLOCK_SKEW_NS", "0", "(tests only) ns added to this host's clock"
    ),
}

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
    )


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
