"""The ``TFPROF_TF_OPS`` switch and its ``--tf-ops`` flag."""

from __future__ import annotations

import pytest

from tfprof.agent import cli
from tfprof.agent.inprocess import config
from tfprof.agent.inprocess.errors import ConfigError


def test_default_is_off_and_values_parse() -> None:
    assert config.load({}).tf_ops is False
    for raw in ("on", "ON", "1", "true", "yes"):
        assert config.load({"TFPROF_TF_OPS": raw}).tf_ops is True
    for raw in ("off", "0", "false", "no"):
        assert config.load({"TFPROF_TF_OPS": raw}).tf_ops is False


def test_a_bad_value_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"TFPROF_TF_OPS='maybe': expected on or off"):
        config.load({"TFPROF_TF_OPS": "maybe"})


def test_flag_sets_the_variable() -> None:
    args = cli.build_parser().parse_args(["run", "--tf-ops", "on", "--", "python", "x.py"])
    environ = config.with_flags(cli._flags(args), {})
    assert environ["TFPROF_TF_OPS"] == "on"
    assert config.load(environ).tf_ops is True
