"""The node-daemon deployment files agree with the CLI, the configuration and each other:
every manifest loads, the daemon's command is a real subcommand with real flags, the
training pod's volume and environment are what the daemon and ``tfprof-agent env`` use."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import pytest

from tfprof.agent import cli
from tfprof.agent.inprocess import config, identity
from tfprof.agent.launch import daemon_env
from tfprof.collector import config as collector_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
K8S = DEPLOY / "kubernetes"
yaml = pytest.importorskip("yaml")


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


def daemon_args(command: list[str]) -> Any:
    assert command[0] == "tfprof-agent"
    args = cli.build_parser().parse_args(command[1:])  # exits on an unknown flag
    assert args.command == "daemon"
    return args


@pytest.mark.parametrize("path", sorted(K8S.glob("*.yaml")), ids=lambda p: p.name)
def test_every_manifest_loads_and_names_what_it_is(path: Path) -> None:
    docs = documents(path.name)
    assert docs
    for doc in docs:
        assert doc["apiVersion"] and doc["kind"] and doc["metadata"]["name"]


def node() -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    docs = documents("node-daemonset.yaml")
    spec = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    return spec, {c["name"]: c for c in spec["containers"]}


def test_the_node_daemon_runs_a_real_subcommand_against_the_collector_beside_it(
    tmp_path: Path,
) -> None:
    spec, containers = node()
    args = daemon_args(containers["agent-daemon"]["command"])
    config.validate_collector(args.collector, "--collector")
    toml = tmp_path / "collector.toml"
    toml.write_text(one(documents("node-daemonset.yaml"), "ConfigMap")["data"]["collector.toml"])
    cfg = collector_config.load(config_file=str(toml), environ={})
    ports = {p["name"]: p["containerPort"] for p in containers["collector"]["ports"]}
    assert cfg.listen.endswith(f":{ports['grpc']}")
    assert args.collector == f"127.0.0.1:{ports['grpc']}"  # one pod: one network namespace
    assert spec["terminationGracePeriodSeconds"] > cfg.grace_s
    assert spec["hostPID"] is True  # psutil samples the pids its socket sees


def test_the_collector_is_held_to_two_gibibytes() -> None:
    _, containers = node()
    assert containers["collector"]["resources"]["limits"]["memory"] == "2Gi"
    for container in containers.values():
        assert "memory" in container["resources"]["limits"]


def test_the_training_pod_mounts_the_folder_the_daemon_serves() -> None:
    spec, containers = node()
    args = daemon_args(containers["agent-daemon"]["command"])
    socket_dir = os.path.dirname(args.socket)
    mounts = {m["name"]: m["mountPath"] for m in containers["agent-daemon"]["volumeMounts"]}
    daemon_volumes = {v["name"]: v for v in spec["volumes"]}
    (run_volume,) = [n for n, p in mounts.items() if p == socket_dir]
    host_path = daemon_volumes[run_volume]["hostPath"]["path"]

    pod = one(documents("training-pod.yaml"), "Pod")
    assert pod["metadata"]["labels"]["tfprof.io/trace"] == "true"
    (volume,) = pod["spec"]["volumes"]  # one volume: socket and bootstrap together
    assert volume["hostPath"]["path"] == host_path
    (train,) = pod["spec"]["containers"]
    (mount,) = train["volumeMounts"]
    assert mount["name"] == volume["name"] and mount["readOnly"] is True
    assert mount["mountPath"] == socket_dir  # the same paths inside both pods
    assert "command" not in train and "tfprof" not in " ".join(train["args"])


def test_the_training_pod_environment_is_what_env_prints() -> None:
    _, containers = node()
    args = daemon_args(containers["agent-daemon"]["command"])
    pod = one(documents("training-pod.yaml"), "Pod")
    (train,) = pod["spec"]["containers"]
    env = {e["name"]: e for e in train["env"]}
    socket = args.socket
    bootstrap = os.path.join(os.path.dirname(socket), "bootstrap")
    printed = daemon_env.daemon_environment(
        socket, bootstrap, capture=env["TFPROF_CAPTURE"]["value"]
    )
    assert {k: env[k]["value"] for k in printed} == printed
    known = {o.env for o in config.OPTIONS.values()} | {"PYTHONPATH", "TFPROF_CAPTURE"}
    assert set(env) <= known, set(env) - known
    downward = {
        k: v["valueFrom"]["fieldRef"]["fieldPath"] for k, v in env.items() if "valueFrom" in v
    }
    assert downward == {
        "TFPROF_POD_NAME": "metadata.name",
        "TFPROF_POD_NAMESPACE": "metadata.namespace",
    }
    assert "TFPROF_POD_NAME" in identity.POD_NAME_VARIABLES
    assert "TFPROF_POD_NAMESPACE" in identity.POD_NAMESPACE_VARIABLES


def test_the_systemd_unit_runs_a_real_daemon_command_in_its_runtime_directory() -> None:
    unit = (DEPLOY / "systemd" / "tfprof-agent-daemon.service").read_text()
    settings = dict(
        line.split("=", 1) for line in unit.splitlines() if "=" in line and not line.startswith("#")
    )
    command = shlex.split(settings["ExecStart"])
    assert os.path.basename(command[0]) == "tfprof-agent"
    args = daemon_args(["tfprof-agent", *command[1:]])
    assert os.path.dirname(args.socket) == "/run/" + settings["RuntimeDirectory"]
    assert settings["KillSignal"] == "SIGTERM"
    assert args.spool_dir in settings["ReadWritePaths"].split()
