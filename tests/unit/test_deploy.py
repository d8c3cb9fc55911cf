"""The shipped deployment files agree with the collector they deploy."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfprof.collector import config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
# The production config example of the docs (operations: running the collector).
COLLECTOR_DOC = DEPLOY.parent / "docs" / "operations" / "collector.md"


def test_the_kubernetes_config_map_is_a_valid_collector_config(tmp_path: Path) -> None:
    yaml = pytest.importorskip("yaml")
    docs = list(
        yaml.safe_load_all((DEPLOY / "kubernetes" / "collector-daemonset.yaml").read_text())
    )
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap"]
    toml = tmp_path / "collector.toml"
    toml.write_text(config_map["data"]["collector.toml"])
    # The token file the ConfigMap names is mounted from a Secret; any file will do here.
    cfg = config.load(config_file=str(toml), environ={})
    assert cfg.data_dir == "/var/lib/tfprof"
    (daemonset,) = [d for d in docs if d["kind"] == "DaemonSet"]
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert cfg.listen.endswith(f":{ports['grpc']}")
    assert cfg.metrics_listen.endswith(f":{ports['metrics']}")
    grace = daemonset["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > cfg.grace_s, "Kubernetes must wait longer than the collector's drain"


def test_the_docs_config_example_loads(tmp_path: Path) -> None:
    text = COLLECTOR_DOC.read_text()
    start = text.index("```toml\n# /etc/tfprof/collector.toml") + len("```toml\n")
    toml = tmp_path / "collector.toml"
    toml.write_text(text[start : text.index("```", start)])
    cfg = config.load(config_file=str(toml), environ={})
    assert cfg.retain_days == 14


def test_the_systemd_unit_runs_serve_with_a_config_file() -> None:
    unit = (DEPLOY / "systemd" / "tfprof-collector.service").read_text()
    assert (
        "ExecStart=/usr/local/bin/tfprof-collector serve --config /etc/tfprof/collector.toml"
        in unit
    )
    assert "KillSignal=SIGTERM" in unit
