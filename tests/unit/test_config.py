"""agent/inprocess/config.py: TFPROF_* parsing, validation messages, job names and task ids."""

from __future__ import annotations

import json

import pytest

from tfprof.agent.inprocess.config import (
    OPTIONS,
    child_environment,
    load,
    validate_job_name,
    with_flags,
)
from tfprof.agent.inprocess.errors import ConfigError
from tfprof.core.errors import InputError, TfprofError


def test_defaults_from_an_empty_environment() -> None:
    cfg = load({})
    assert cfg.collector == ""
    assert cfg.job == ""
    assert cfg.output == ""
    assert cfg.source == "auto"
    assert cfg.replay_path is None
    assert cfg.replay_speed == 1.0
    assert cfg.replay_repeat == 1
    assert cfg.host_metrics_interval_ms == 500
    assert cfg.queue_bytes == 64 << 20
    assert cfg.exit_timeout_s == 10.0
    assert cfg.cupti_buffer_bytes == 8 << 20
    assert cfg.log_level == "WARNING"
    assert (cfg.socket, cfg.run_id, cfg.run_dir) == ("", "", "")


def test_every_option_is_a_documented_tfprof_variable() -> None:
    for opt in OPTIONS.values():
        assert opt.env.startswith("TFPROF_")
        assert opt.doc


def test_each_variable_is_parsed() -> None:
    cfg = load(
        {
            "TFPROF_COLLECTOR": "collector.example:50051",
            "TFPROF_JOB": "resnet-50_v2.1",
            "TFPROF_OUTPUT": "/tmp/out.json.gz",
            "TFPROF_SOURCE": "replay:/data/trace.json",
            "TFPROF_REPLAY_SPEED": "2.5",
            "TFPROF_REPLAY_REPEAT": "3",
            "TFPROF_HOST_METRICS_INTERVAL": "0",
            "TFPROF_QUEUE_BYTES": "1048576",
            "TFPROF_EXIT_TIMEOUT": "0.5",
            "TFPROF_CUPTI_BUFFER_BYTES": "65536",
            "TFPROF_LOG_LEVEL": " debug ",
            "TFPROF_SOCKET": "/run/tfprof/s.sock",
            "TFPROF_RUN_ID": "abc123",
            "TFPROF_RUN_DIR": "/run/tfprof",
        }
    )
    assert cfg.collector == "collector.example:50051"
    assert cfg.job == "resnet-50_v2.1"
    assert cfg.output == "/tmp/out.json.gz"
    assert cfg.source == "replay:/data/trace.json"
    assert cfg.replay_path == "/data/trace.json"
    assert cfg.replay_speed == 2.5
    assert cfg.replay_repeat == 3
    assert cfg.host_metrics_interval_ms == 0
    assert cfg.queue_bytes == 1 << 20
    assert cfg.exit_timeout_s == 0.5
    assert cfg.cupti_buffer_bytes == 65536
    assert cfg.log_level == "DEBUG"
    assert cfg.socket == "/run/tfprof/s.sock"
    assert cfg.run_id == "abc123"
    assert cfg.run_dir == "/run/tfprof"


@pytest.mark.parametrize("source", ["auto", "cupti", "none", "replay:x.json"])
def test_valid_sources(source: str) -> None:
    assert load({"TFPROF_SOURCE": source}).source == source


def test_replay_speed_max_means_unpaced() -> None:
    assert load({"TFPROF_REPLAY_SPEED": "max"}).replay_speed is None
    assert load({"TFPROF_REPLAY_SPEED": "MAX"}).replay_speed is None


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("TFPROF_SOURCE", "gpu"),
        ("TFPROF_SOURCE", "replay:"),
        ("TFPROF_COLLECTOR", "localhost"),
        ("TFPROF_COLLECTOR", ":50051"),
        ("TFPROF_COLLECTOR", "host:port"),
        ("TFPROF_COLLECTOR", "host:0"),
        ("TFPROF_COLLECTOR", "host:65536"),
        ("TFPROF_REPLAY_SPEED", "fast"),
        ("TFPROF_REPLAY_SPEED", "0"),
        ("TFPROF_REPLAY_SPEED", "-1"),
        ("TFPROF_REPLAY_SPEED", "nan"),
        ("TFPROF_REPLAY_REPEAT", "0"),
        ("TFPROF_REPLAY_REPEAT", "1.5"),
        ("TFPROF_HOST_METRICS_INTERVAL", "-1"),
        ("TFPROF_HOST_METRICS_INTERVAL", "often"),
        ("TFPROF_QUEUE_BYTES", "1024"),
        ("TFPROF_QUEUE_BYTES", "64MB"),
        ("TFPROF_EXIT_TIMEOUT", "-0.1"),
        ("TFPROF_EXIT_TIMEOUT", "inf"),
        ("TFPROF_CUPTI_BUFFER_BYTES", "4096"),
        ("TFPROF_JOB", "a/b"),
    ],
)
def test_bad_values_name_the_variable(var: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        load({var: value})
    message = str(info.value)
    assert value in message
    if var != "TFPROF_JOB":  # the job name message names the name, not the variable
        assert var in message


def test_minimums_are_inclusive() -> None:
    cfg = load(
        {
            "TFPROF_QUEUE_BYTES": str(1 << 16),
            "TFPROF_CUPTI_BUFFER_BYTES": str(1 << 16),
            "TFPROF_REPLAY_REPEAT": "1",
            "TFPROF_EXIT_TIMEOUT": "0",
        }
    )
    assert cfg.queue_bytes == 1 << 16
    assert cfg.exit_timeout_s == 0.0


@pytest.mark.parametrize(
    "name",
    ["train", "resnet50", "job-1", "job_1.v2", "0abc", "A" * 64, "a..b"],
)
def test_normal_job_names_are_accepted(name: str) -> None:
    assert validate_job_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "a/b",
        "a\\b",
        "/abs",
        "..",
        "../etc",
        ".hidden",
        "-flag",
        "_x",
        "job\n",
        "jo\x00b",
        "tab\there",
        "with space",
        "A" * 65,
        "naïve",
    ],
)
def test_unsafe_job_names_are_rejected(name: str) -> None:
    with pytest.raises(ConfigError, match="invalid job name"):
        validate_job_name(name)


def test_config_error_is_bad_input_with_exit_status_2() -> None:
    assert issubclass(ConfigError, InputError) and issubclass(ConfigError, TfprofError)
    assert ConfigError("x").exit_code == 2


def task_from_env(environ: dict[str, str], pid: int) -> str:
    return load(environ).task(pid)


def tf_config(task_type: str, index: int) -> str:
    return json.dumps({"cluster": {}, "task": {"type": task_type, "index": index}})


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"TF_CONFIG": tf_config("worker", 3)}, "3"),
        ({"TF_CONFIG": tf_config("chief", 0)}, "chief0"),
        ({"TF_CONFIG": tf_config("ps", 1)}, "ps1"),
        ({"TF_CONFIG": json.dumps({"task": {"index": 2}})}, "2"),
        ({"RANK": "5"}, "5"),
        ({"OMPI_COMM_WORLD_RANK": "6"}, "6"),
        ({"PMI_RANK": "8"}, "8"),
        ({"SLURM_PROCID": "7"}, "7"),
        ({}, "4242"),
    ],
)
def test_task_from_env(environ: dict[str, str], expected: str) -> None:
    assert task_from_env(environ, pid=4242) == expected
    assert load(environ).rank == ("" if expected == "4242" else expected)


def test_task_precedence_tf_config_then_rank_variables() -> None:
    everything = {
        "TF_CONFIG": tf_config("worker", 1),
        "RANK": "2",
        "OMPI_COMM_WORLD_RANK": "3",
        "SLURM_PROCID": "4",
    }
    assert task_from_env(everything, 99) == "1"
    del everything["TF_CONFIG"]
    assert task_from_env(everything, 99) == "2"
    del everything["RANK"]
    assert task_from_env(everything, 99) == "3"
    del everything["OMPI_COMM_WORLD_RANK"]
    assert task_from_env(everything, 99) == "4"


@pytest.mark.parametrize(
    "environ",
    [
        {"TF_CONFIG": "not json"},
        {"TF_CONFIG": "[1, 2]"},
        {"TF_CONFIG": json.dumps({"task": {"type": "worker"}})},
        {"TF_CONFIG": json.dumps({"task": {"index": "x"}})},
        {"RANK": "-1"},
        {"RANK": "zero"},
        {"SLURM_PROCID": ""},
    ],
)
def test_unusable_rank_falls_back_to_the_pid(environ: dict[str, str]) -> None:
    assert task_from_env(environ, pid=31337) == "31337"


def test_bad_tf_config_still_lets_rank_variables_decide() -> None:
    assert task_from_env({"TF_CONFIG": "{", "RANK": "9"}, pid=1) == "9"


def test_the_job_name_rule_is_the_products_one() -> None:
    from tfprof.core.names import RULE, is_safe_name

    for name in ("ok-1", "../etc", "A" * 64, "A" * 65, ".hidden"):
        accepted = True
        try:
            validate_job_name(name)
        except ConfigError as exc:
            accepted = False
            assert RULE in str(exc)
        assert accepted == is_safe_name(name), name


def test_flags_are_laid_over_the_environment_as_their_variables() -> None:
    base = {"TFPROF_JOB": "from-env", "TFPROF_SOURCE": "none", "HOME": "/home/u"}
    env = with_flags({"job": "from-flag", "replay_speed": "max"}, base)
    assert env == {**base, "TFPROF_JOB": "from-flag", "TFPROF_REPLAY_SPEED": "max"}
    assert base["TFPROF_JOB"] == "from-env"  # the caller's mapping is left alone
    cfg = load(env)
    assert (cfg.job, cfg.source, cfg.replay_speed) == ("from-flag", "none", None)


def test_the_child_environment_carries_the_flags_and_the_launchers_decisions() -> None:
    env = with_flags({"collector": "c:1"}, {"PYTHONPATH": "/user", "KEEP": "1"})
    child = child_environment(
        env, bootstrap_dir="/boot", job="j", source="none", run_id="r", run_dir="/d",
        socket="/d/s",
    )  # fmt: skip
    assert child["PYTHONPATH"] == "/boot:/user" and child["KEEP"] == "1"
    cfg = load(child)
    assert (cfg.collector, cfg.job, cfg.source) == ("c:1", "j", "none")
    assert (cfg.run_id, cfg.run_dir, cfg.socket) == ("r", "/d", "/d/s")
    bare = child_environment({}, bootstrap_dir="/boot", job="j", source="none", run_id="r",
                             run_dir="/d", socket="/d/s")  # fmt: skip
    assert bare["PYTHONPATH"] == "/boot"


@pytest.mark.parametrize(("raw", "skew"), [("", 0), ("-5000", -5000), ("12", 12), ("x", 0)])
def test_test_clock_skew_is_read_leniently(raw: str, skew: int) -> None:
    assert load({"TFPROF_TEST_CLOCK_SKEW_NS": raw}).clock_skew_ns == skew
    assert load({}).clock_skew_ns == 0


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("http://h:50051", "without a scheme"),
        ("grpc://h:50051", "without a scheme"),
        ("h:0", "out of range"),
        ("h:65536", "out of range"),
        ("h", "expected HOST:PORT"),
        ("h:port", "expected HOST:PORT"),
        ("h/x:1", "expected HOST:PORT"),
    ],
)
def test_collector_addresses_are_checked_and_named_as_typed(value: str, says: str) -> None:
    from tfprof.agent.inprocess.config import validate_collector

    with pytest.raises(ConfigError, match=says) as flag:
        validate_collector(value, "--collector")
    assert str(flag.value).startswith(f"--collector {value}:")
    with pytest.raises(ConfigError, match=says) as env:
        load({"TFPROF_COLLECTOR": value})
    assert str(env.value).startswith("TFPROF_COLLECTOR=")


def test_good_collector_addresses_pass() -> None:
    for value in ("collector:50051", "10.0.0.1:1", "[::1]:65535"):
        assert load({"TFPROF_COLLECTOR": value}).collector == value
