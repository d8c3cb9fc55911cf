"""collector/config.py: flags > config file > environment > defaults, checked in one place."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfprof.collector.cli import main
from tfprof.collector.config import (
    OPTIONS,
    CollectorConfig,
    ConfigError,
    load,
    parse_size,
    read_token,
)


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_defaults_need_only_a_data_dir() -> None:
    config = load({"data_dir": "/d"}, environ={})
    assert config == CollectorConfig(data_dir="/d")
    assert config.max_message_bytes == 64 << 20
    assert config.fsync and not config.tls


def test_every_option_has_an_env_name_a_doc_and_a_field() -> None:
    fields = set(CollectorConfig.__dataclass_fields__)
    for key, opt in OPTIONS.items():
        assert opt.env == "TFPROF_COLLECTOR_" + key.upper()
        assert opt.doc
        assert key in fields or key == "grace"


def test_precedence_flags_then_file_then_env_then_default(tmp_path: Path) -> None:
    toml = write(tmp_path / "c.toml", 'data-dir = "/from-file"\nmax_workers = 32\ngrace = 3\n')
    env = {
        "TFPROF_COLLECTOR_DATA_DIR": "/from-env",
        "TFPROF_COLLECTOR_MAX_WORKERS": "64",
        "TFPROF_COLLECTOR_GRACE": "7",
        "TFPROF_COLLECTOR_RETAIN_DAYS": "30",
    }
    config = load({"grace": "1.5", "max_workers": None}, toml, env)
    assert config.grace_s == 1.5  # flag beats file and env
    assert config.max_workers == 32  # file beats env
    assert config.data_dir == "/from-file"
    assert config.retain_days == 30  # env beats default
    assert config.listen == "127.0.0.1:4317"  # default


def test_the_config_file_can_come_from_the_environment(tmp_path: Path) -> None:
    toml = write(tmp_path / "c.toml", 'data_dir = "/x"\nfsync = false\nretain-bytes = "10G"\n')
    config = load({}, None, {"TFPROF_COLLECTOR_CONFIG": toml})
    assert (config.data_dir, config.fsync, config.retain_bytes) == ("/x", False, 10 << 30)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"listen": "nohost"}, "--listen='nohost': expected HOST:PORT"),
        ({"listen": "h:99999"}, "expected HOST:PORT"),
        ({"max_workers": "0"}, "--max-workers='0': must be at least 1"),
        ({"max_workers": "many"}, "expected a whole number"),
        ({"grace": "nan"}, "--grace='nan': expected a finite number of seconds"),
        ({"grace": "-1"}, "expected a finite number of seconds >= 0"),
        ({"max_message_bytes": "12"}, "must be at least 1K"),
        ({"max_message_bytes": "lots"}, "expected a size"),
        ({"retain_days": "inf"}, "--retain-days='inf'"),
        ({"fsync": "maybe"}, "--fsync='maybe': expected true or false"),
        ({"log_level": "LOUD"}, "--log-level='LOUD': expected one of DEBUG"),
        ({"metrics_listen": ":"}, "--metrics-listen"),
        ({"tls_cert": "c.pem"}, "--tls-cert and --tls-key go together"),
        ({"bogus": "1"}, "unknown option"),
    ],
)
def test_bad_values_name_the_option_and_the_source(flags: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=None) as info:
        load({"data_dir": "/d", **flags}, environ={})
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_bad_env_value_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="TFPROF_COLLECTOR_MAX_WORKERS='x'"):
        load({"data_dir": "/d"}, environ={"TFPROF_COLLECTOR_MAX_WORKERS": "x"})


def test_missing_data_dir_is_an_error() -> None:
    with pytest.raises(ConfigError, match="no data directory"):
        load({}, environ={})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("listen = [1, 2]", "must be a string, number or boolean"),
        ("unknown_thing = 1", "unknown option 'unknown_thing'"),
        ("listen = ", "not valid TOML"),
        ("max-workers = -3", "max-workers in"),
    ],
)
def test_bad_config_files(tmp_path: Path, text: str, message: str) -> None:
    toml = write(tmp_path / "c.toml", 'data-dir = "/d"\n' + text + "\n")
    with pytest.raises(ConfigError) as info:
        load({}, toml, {})
    assert message in str(info.value)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load({"data_dir": "/d"}, str(tmp_path / "nope.toml"), {})


@pytest.mark.parametrize(
    ("raw", "value"),
    [("0", 0), ("1024", 1024), ("64M", 64 << 20), ("1.5GiB", 3 << 29), ("2t", 2 << 40),
     ("10GB", 10 << 30), ("512 K", 512 << 10)],
)  # fmt: skip
def test_parse_size(raw: str, value: int) -> None:
    assert parse_size(raw) == value


def test_read_token(tmp_path: Path) -> None:
    assert read_token(write(tmp_path / "t", "  s3cret-token\n")) == "s3cret-token"
    for bad, why in [("", "empty"), ("two words", "one word"), ("t\x01k", "one word")]:
        with pytest.raises(ConfigError, match=why):
            read_token(write(tmp_path / "t", bad))
    with pytest.raises(ConfigError, match="auth token file"):
        read_token(str(tmp_path / "missing"))


def test_serve_with_a_bad_value_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["serve", "--data-dir", str(tmp_path), "--max-workers", "zero"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == [
        "tfprof-collector: --max-workers='zero': expected a whole number"
    ]


def test_serve_with_a_missing_token_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["serve", "--data-dir", str(tmp_path), "--listen", "127.0.0.1:0",
                 "--auth-token-file", str(tmp_path / "none")])  # fmt: skip
    assert code == 2
    assert "auth token file" in capsys.readouterr().err
