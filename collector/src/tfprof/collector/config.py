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
from typing import Any

from tfprof.collector.errors import InvalidArgument
from tfprof.collector.options import OPTIONS, Option

__all__ = ["OPTIONS", "CollectorConfig", "ConfigError", "Option", "load"]

CONFIG_ENV = "TFPROF_COLLECTOR_CONFIG"
BLAS_THREADS_ENV = "OPENBLAS_NUM_THREADS"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


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
    token_key_file: str = ""
    tls_client_ca: str = ""
    insecure: bool = False
    data_group: str = ""
    redact: str = ""
    empty_stream_grace: float = 600.0  # seconds
    retain_days: float = 0.0
    retain_bytes: int = 0
    lake: str = ""
    compact_interval: float = 60.0  # seconds
    rank_figures_interval: float = 30.0  # seconds; 0 = off
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
    "token_key_file": str,
    "tls_client_ca": str,
    "insecure": _bool,
    "data_group": str,
    "redact": str,
    "empty_stream_grace": _non_negative("seconds"),
    "retain_days": _non_negative("days"),
    "retain_bytes": parse_size,
    "lake": str,
    "compact_interval": _non_negative("seconds"),
    "rank_figures_interval": _non_negative("seconds"),
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
    if config.tls_client_ca and not config.tls:
        raise ConfigError("--tls-client-ca needs --tls-cert and --tls-key (mTLS is TLS)")
    return config


def read_file_text(what: str, path: str) -> bytes:
    """A file named by an option (certificate, key, token), with a one-line error."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"{what} {path}: {exc.strerror or exc}") from None


def read_token(path: str, what: str = "auth token file") -> str:
    """The bearer token in ``path``: one line, surrounding whitespace ignored."""
    raw = read_file_text(what, path)
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {path}: the token must be ASCII") from None
    if not token:
        raise ConfigError(f"{what} {path}: empty")
    if any(c.isspace() or not c.isprintable() for c in token):
        raise ConfigError(f"{what} {path}: the token must be one word, no spaces")
    return token


def read_token_key(path: str) -> bytes:
    """The key of job and node tokens: one word of at least 32 characters."""
    key = read_token(path, "token key file").encode()
    if len(key) < 32:
        raise ConfigError(
            f"token key file {path}: {len(key)} characters; a key has at least 32 "
            "(e.g. `openssl rand -hex 32`)"
        )
    return key


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
