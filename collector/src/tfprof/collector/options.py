"""Every option of ``tfprof-collector serve``: its flag, its ``TFPROF_COLLECTOR_*``
variable, its default and a one-line doc. Declared once here; config.py reads them,
``serve --help`` shows them."""

from __future__ import annotations

from typing import NamedTuple


class Option(NamedTuple):
    env: str
    default: str
    doc: str


OPTIONS: dict[str, Option] = {
    "listen": Option(
        "TFPROF_COLLECTOR_LISTEN", "127.0.0.1:4317", "HOST:PORT to serve gRPC on; port 0 picks one"
    ),
    "data_dir": Option("TFPROF_COLLECTOR_DATA_DIR", "", "where streams are stored (required)"),
    "max_workers": Option(
        "TFPROF_COLLECTOR_MAX_WORKERS",
        "16",
        "threads that store batches (fdatasync before the ack) off the event loop",
    ),
    "max_streams": Option(
        "TFPROF_COLLECTOR_MAX_STREAMS",
        "16384",
        "agent streams held at once; beyond, RESOURCE_EXHAUSTED and agents retry with backoff",
    ),
    "max_inflight_bytes": Option(
        "TFPROF_COLLECTOR_MAX_INFLIGHT_BYTES",
        str(256 << 20),
        "received batch bytes being parsed and stored at once; beyond, streams wait "
        "(flow control); K/M/G suffixes allowed",
    ),
    "hello_timeout": Option(
        "TFPROF_COLLECTOR_HELLO_TIMEOUT",
        "30",
        "seconds a new stream may take to say hello before it is closed",
    ),
    "grace": Option(
        "TFPROF_COLLECTOR_GRACE", "10", "seconds running streams get to finish after SIGTERM"
    ),
    "max_message_bytes": Option(
        "TFPROF_COLLECTOR_MAX_MESSAGE_BYTES",
        str(64 << 20),
        "largest message accepted (RESOURCE_EXHAUSTED beyond); K/M/G suffixes allowed",
    ),
    "fsync": Option(
        "TFPROF_COLLECTOR_FSYNC",
        "true",
        "fdatasync each batch before acknowledging it (false: survives a collector crash, "
        "not a host crash)",
    ),
    "metrics_listen": Option(
        "TFPROF_COLLECTOR_METRICS_LISTEN", "", "HOST:PORT for Prometheus metrics; empty = off"
    ),
    "tls_cert": Option("TFPROF_COLLECTOR_TLS_CERT", "", "PEM certificate chain; enables TLS"),
    "tls_key": Option("TFPROF_COLLECTOR_TLS_KEY", "", "PEM private key of --tls-cert"),
    "auth_token_file": Option(
        "TFPROF_COLLECTOR_AUTH_TOKEN_FILE",
        "",
        "file holding the fleet bearer token: it allows every call (streams, captures)",
    ),
    "token_key_file": Option(
        "TFPROF_COLLECTOR_TOKEN_KEY_FILE",
        "",
        "file holding the key of job and node tokens (tfprof-collector token): each allows "
        "streams of its job or host only",
    ),
    "tls_client_ca": Option(
        "TFPROF_COLLECTOR_TLS_CLIENT_CA",
        "",
        "PEM CA that signs client certificates; given, every client must present one (mTLS)",
    ),
    "insecure": Option(
        "TFPROF_COLLECTOR_INSECURE",
        "false",
        "serve a non-loopback --listen address without a token or client certificates "
        "(anyone who reaches the port may write and capture)",
    ),
    "data_group": Option(
        "TFPROF_COLLECTOR_DATA_GROUP",
        "",
        "group that may read the data dir (folders 0750, files 0640; default: the "
        "collector's own group)",
    ),
    "redact": Option(
        "TFPROF_COLLECTOR_REDACT",
        "",
        "more option names whose values are masked in stored command lines (comma-"
        "separated; key, token, secret, password, passwd and auth always are)",
    ),
    "empty_stream_grace": Option(
        "TFPROF_COLLECTOR_EMPTY_STREAM_GRACE",
        "600",
        "seconds after which a closed stream that stored no record is removed",
    ),
    "retain_days": Option(
        "TFPROF_COLLECTOR_RETAIN_DAYS", "0", "delete job runs idle longer than this; 0 = keep"
    ),
    "retain_bytes": Option(
        "TFPROF_COLLECTOR_RETAIN_BYTES",
        "0",
        "delete oldest finished job runs beyond this size (K/M/G/T suffixes); 0 = no limit",
    ),
    "lake": Option(
        "TFPROF_COLLECTOR_LAKE",
        "",
        "where Parquet segments go: a path or URL (file://, s3://, gs://) many collectors "
        "may share; empty = DATA_DIR/lake",
    ),
    "compact_interval": Option(
        "TFPROF_COLLECTOR_COMPACT_INTERVAL",
        "60",
        "seconds between compactions of running streams into the lake (finished streams "
        "at once); 0 = only when they finish",
    ),
    "rank_figures_interval": Option(
        "TFPROF_COLLECTOR_RANK_FIGURES_INTERVAL",
        "30",
        "seconds between reads of running jobs' last minutes for the per-rank metrics "
        "(step time, arrival skew, exposed communication) and top; 0 = off",
    ),
    "log_level": Option("TFPROF_COLLECTOR_LOG_LEVEL", "INFO", "level of the tfprof loggers"),
}
