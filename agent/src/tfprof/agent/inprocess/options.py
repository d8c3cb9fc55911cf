"""Every agent option: its ``TFPROF_*`` variable, its default and a one-line doc.

Declared once here; ``config.load`` reads them, the CLI's flags and ``--help`` lines come
from them. Imported inside user processes: standard library only.
"""

from __future__ import annotations

from typing import NamedTuple


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
    "auth_token": Option(
        "TFPROF_AUTH_TOKEN",
        "",
        "bearer token the collector requires: its fleet token, or one minted for this job or "
        "node (tfprof-collector token)",
    ),
    "tls_cert": Option(
        "TFPROF_TLS_CERT", "", "PEM client certificate, for a collector that requires one (mTLS)"
    ),
    "tls_key": Option("TFPROF_TLS_KEY", "", "PEM private key of TFPROF_TLS_CERT"),
    "redact": Option(
        "TFPROF_REDACT",
        "",
        "comma-separated patterns (case-insensitive substrings): an option of the stored "
        "command line whose name contains one has its value masked (key, token, secret, "
        "password, passwd and auth always are), and a Python frame whose file path "
        "contains one leaves the process as <redacted>",
    ),
    # Code attribution (docs/concepts/code-attribution.md): Python stacks of the job.
    "code": Option(
        "TFPROF_CODE",
        "sample",
        "Python stacks of the job's threads: off, sample (a sampler thread reads every "
        "thread's stack TFPROF_CODE_HZ times a second, within 1 % of the job's CPU) or "
        "launch (sample, and CUPTI's launch callbacks take the launching stack of 1 in "
        "TFPROF_CODE_LAUNCH_EVERY launches and of each call site's first: every launch "
        "pays a callback)",
    ),
    "code_hz": Option(
        "TFPROF_CODE_HZ",
        "100",
        "stack samples a second per thread (the sampler slows itself down while it would "
        "take over 0.5 % of the job's CPU)",
    ),
    "code_launch_every": Option(
        "TFPROF_CODE_LAUNCH_EVERY",
        "8",
        "--code launch: take the stack of 1 launch in N "
        "(and always the first from each Python line)",
    ),
    # The node daemon's socket is open to every user of the node: what it accepts.
    "daemon_max_connections": Option(
        "TFPROF_DAEMON_MAX_CONNECTIONS", "2048", "connections the node daemon holds at once"
    ),
    "daemon_max_connections_per_uid": Option(
        "TFPROF_DAEMON_MAX_CONNECTIONS_PER_UID",
        "512",
        "connections one uid may hold on the node daemon (the others stay served)",
    ),
    "daemon_hello_timeout": Option(
        "TFPROF_DAEMON_HELLO_TIMEOUT",
        "5",
        "seconds a new connection to the node daemon may take to say hello",
    ),
    "daemon_root_may_join": Option(
        "TFPROF_DAEMON_ROOT_MAY_JOIN",
        "on",
        "on: processes of root may join a job run another uid opened on this node (runs "
        "are bound to the uid of their first process; other uids are refused)",
    ),
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
