"""The collector daemon's settings, read here and nowhere else.

Every option of ``tfprof-collector serve`` is declared once in ``OPTIONS`` with its flag,
its ``TFPROF_COLLECTOR_*`` variable, its default and a one-line doc. Values come from,
highest precedence first: command-line flags, the TOML config file (``--config FILE`` or
``TFPROF_COLLECTOR_CONFIG``; keys are option names, ``data-dir`` or ``data_dir``),
environment variables, defaults. ``load`` checks every value and raises ``ConfigError``
with one line naming the option and where its value came from.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from tfprof.collector.errors import InvalidArgument

CONFIG_ENV = "TFPROF_COLLECTOR_CONFIG"
BLAS_THREADS_ENV = "OPENBLAS_NUM_THREADS"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


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
        "file holding the bearer token agents must send; empty = no authentication",
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
    "log_level": Option("TFPROF_COLLECTOR_LOG_LEVEL", "INFO", "level of the tfprof loggers"),
}


class ConfigError(InvalidArgument):
    """An option has a value we cannot use; the message names it and its source."""


@dataclass(frozen=True)
class CollectorConfig:
    listen: str = "127.0.0.1:4317"
    data_dir: str = ""
    max_workers: int = 16
    max_streams: int = 16384
    max_inflight_bytes: int = 256 << 20
    hello_timeout: float = 30.0  # seconds
    grace_s: float = 10.0
    max_message_bytes: int = 64 << 20
    fsync: bool = True
    metrics_listen: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    auth_token_file: str = ""
    retain_days: float = 0.0
    retain_bytes: int = 0
    lake: str = ""
    compact_interval: float = 60.0  # seconds
    log_level: str = "INFO"

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert)


def flag_name(key: str) -> str:
    return "--" + key.replace("_", "-")


# -- value parsers: each takes the raw text and returns the typed value or raises ValueError


def _address(raw: str) -> str:
    host, sep, port = raw.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError("expected HOST:PORT")
    return raw


def _optional_address(raw: str) -> str:
    return _address(raw) if raw else raw


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError("expected a whole number") from None
        if value < minimum:
            raise ValueError(f"must be at least {minimum}")
        return value

    return parse


def _non_negative(unit: str) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"expected a number of {unit}") from None
        if not math.isfinite(value) or value < 0:  # nan slips past `<`
            raise ValueError(f"expected a finite number of {unit} >= 0")
        return value

    return parse


def _positive(unit: str) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        value = _non_negative(unit)(raw)
        if value == 0:
            raise ValueError(f"expected a number of {unit} > 0")
        return value

    return parse


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(raw: str) -> int:
    """Bytes from ``123``, ``64M``, ``1.5GiB``, ``10GB`` (binary units throughout)."""
    m = _SIZE.fullmatch(raw.strip())
    if not m:
        raise ValueError("expected a size such as 1048576, 512M or 10G")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def _positive_size(raw: str) -> int:
    value = parse_size(raw)
    if value < 1024:
        raise ValueError("must be at least 1K")
    return value


def _bool(raw: str) -> bool:
    low = raw.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


def _log_level(raw: str) -> str:
    if raw.upper() not in LOG_LEVELS:
        raise ValueError(f"expected one of {', '.join(LOG_LEVELS)}")
    return raw.upper()


# Each parser returns its CollectorConfig field's type; the fields differ in type, so the
# table (and ``load``'s keyword dict) is typed Any and the dataclass gets them by name.
_PARSERS: dict[str, Callable[[str], Any]] = {
    "listen": _address,
    "data_dir": str,
    "max_workers": _int_at_least(1),
    "max_streams": _int_at_least(1),
    "max_inflight_bytes": _positive_size,
    "hello_timeout": _positive("seconds"),
    "grace": _non_negative("seconds"),
    "max_message_bytes": _positive_size,
    "fsync": _bool,
    "metrics_listen": _optional_address,
    "tls_cert": str,
    "tls_key": str,
    "auth_token_file": str,
    "retain_days": _non_negative("days"),
    "retain_bytes": parse_size,
    "lake": str,
    "compact_interval": _non_negative("seconds"),
    "log_level": _log_level,
}
_FIELDS = {"grace": "grace_s"}


def read_config_file(path: str) -> dict[str, str]:
    """The options a TOML file sets, keyed like ``OPTIONS``, values as text."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        raise ConfigError(f"config file {path}: reading TOML needs Python 3.11+") from None
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {path}: not found") from None
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: not valid TOML: {exc}") from None
    values: dict[str, str] = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name not in OPTIONS:
            raise ConfigError(f"config file {path}: unknown option {key!r}")
        if isinstance(value, bool):
            values[name] = "true" if value else "false"
        elif isinstance(value, (int, float, str)):
            values[name] = str(value)
        else:
            raise ConfigError(f"config file {path}: {key} must be a string, number or boolean")
    return values


def load(
    flags: Mapping[str, object] | None = None,
    config_file: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> CollectorConfig:
    """Merge flags > config file > environment > defaults into one checked config.

    ``flags`` maps option names to values given on the command line (None = not given).
    ``config_file`` is the ``--config`` flag; without it ``TFPROF_COLLECTOR_CONFIG`` names
    the file, if set.
    """
    env = os.environ if environ is None else environ
    given = {k: str(v) for k, v in (flags or {}).items() if v is not None}
    unknown = set(given) - set(OPTIONS)
    if unknown:
        raise ConfigError(f"unknown option(s): {', '.join(sorted(unknown))}")
    path = config_file or env.get(CONFIG_ENV, "").strip() or None
    from_file = read_config_file(path) if path else {}

    values: dict[str, Any] = {}
    for key, opt in OPTIONS.items():
        if key in given:
            raw, source = given[key], flag_name(key)
        elif key in from_file:
            raw, source = from_file[key], f"{key.replace('_', '-')} in {path}"
        elif opt.env in env:
            raw, source = env[opt.env], opt.env
        else:
            raw, source = opt.default, "default"
        raw = raw.strip()
        try:
            values[_FIELDS.get(key, key)] = _PARSERS[key](raw)
        except ValueError as exc:
            raise ConfigError(f"{source}={raw!r}: {exc}") from None

    config = CollectorConfig(**values)
    if not config.data_dir:
        raise ConfigError(
            f"no data directory: pass --data-dir, set data-dir in the config file "
            f"or {OPTIONS['data_dir'].env}"
        )
    if bool(config.tls_cert) != bool(config.tls_key):
        raise ConfigError("--tls-cert and --tls-key go together: give both or neither")
    return config


def read_file_text(what: str, path: str) -> bytes:
    """A file named by an option (certificate, key, token), with a one-line error."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"{what} {path}: {exc.strerror or exc}") from None


def read_token(path: str) -> str:
    """The bearer token in ``path``: one line, surrounding whitespace ignored."""
    raw = read_file_text("auth token file", path)
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"auth token file {path}: the token must be ASCII") from None
    if not token:
        raise ConfigError(f"auth token file {path}: empty")
    if any(c.isspace() or not c.isprintable() for c in token):
        raise ConfigError(f"auth token file {path}: the token must be one word, no spaces")
    return token


# -- clients of a running collector (capture, captures) ----------------------------------

DEFAULT_COLLECTOR = "127.0.0.1:4317"


def client_auth_token_file(environ: Mapping[str, str] | None = None) -> str:
    """The token file a client command uses when ``--auth-token-file`` is not given: the
    one ``serve`` reads (``TFPROF_COLLECTOR_AUTH_TOKEN_FILE``), handy on the collector's
    own host; empty when unset."""
    env = os.environ if environ is None else environ
    return env.get(OPTIONS["auth_token_file"].env, "").strip()


def check_collector_address(raw: str, flag: str = "--collector") -> str:
    try:
        return _address(raw.strip())
    except ValueError:
        raise ConfigError(f"{flag} {raw!r}: expected HOST:PORT (no scheme)") from None


def import_numpy_without_blas_threads() -> None:
    """Import numpy with OpenBLAS on one thread (the CLI does, before anything imports
    it). No command calls BLAS, but OpenBLAS starts a thread per core when numpy is
    imported, and each spins on a core before it sleeps (bench/results/cpu-design-choices.txt,
    "blas"): on a 2-core machine that is the core the commands' read-ahead threads want.
    The variable is put back, so
    processes we start see the user's own setting; a value the user set is left alone."""
    if "numpy" in sys.modules or BLAS_THREADS_ENV in os.environ:
        return
    os.environ[BLAS_THREADS_ENV] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ[BLAS_THREADS_ENV]
