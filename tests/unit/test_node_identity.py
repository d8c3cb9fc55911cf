"""Job identity without a launcher, the exports of `tfprof-agent env`, and the daemon's
checks of what a hook says and of its socket."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from tfprof.agent.inprocess import config, identity
from tfprof.agent.inprocess.errors import UsageError
from tfprof.agent.launch import daemon, daemon_env
from tfprof.core.names import is_safe_name


def test_the_scheduler_names_the_job_and_its_ranks_share_one_run() -> None:
    slurm = identity.scheduler_job({"SLURM_JOB_ID": "77", "SLURM_JOB_NAME": "llm pretrain"})
    assert slurm == identity.SchedulerJob("llm-pretrain-77", "slurm:77")
    rank0 = identity.resolve("", "", slurm, ["python", "train.py"])
    rank1 = identity.resolve("", "", slurm, ["python", "other.py"])
    assert rank0 == rank1 and rank0[0] == "llm-pretrain-77"
    pod = identity.scheduler_job({"POD_NAME": "bert-worker-0", "TFPROF_POD_NAMESPACE": "ml"})
    assert pod is not None and pod.name == "ml.bert-worker-0"
    elastic = identity.scheduler_job({"TORCHELASTIC_RUN_ID": "none", "PMIX_NAMESPACE": "mpi-9"})
    assert elastic is not None and elastic.key == "pmix:mpi-9"  # torchrun's placeholder skipped
    assert identity.scheduler_job({}) is None


def test_tfprof_job_wins_and_a_bare_command_names_itself() -> None:
    slurm = identity.scheduler_job({"SLURM_JOB_ID": "77"})
    assert identity.resolve("mine", "", slurm, ["python"])[0] == "mine"
    assert identity.resolve("", "abc", None, ["python3.11", "-u", "train.py"]) == ("train", "abc")
    assert (
        identity.command_name(["python", "-m", "torch.distributed.run"]) == "torch.distributed.run"
    )
    first, second = identity.resolve("", "", None, ["x"]), identity.resolve("", "", None, ["x"])
    assert first[1] != second[1]  # no scheduler: each start is a run of its own


def test_any_text_becomes_a_safe_distinct_name() -> None:
    long_a, long_b = "a" * 100 + "/x", "a" * 100 + "/y"
    for text in ("ns/pod name", "..", long_a, "é"):
        assert is_safe_name(identity.safe_name(text))
    assert identity.safe_name(long_a) != identity.safe_name(long_b)


def test_config_reads_the_scheduler_and_the_relay() -> None:
    cfg = config.load(
        {"SLURM_JOB_ID": "5", "TFPROF_RELAY": "daemon", "TFPROF_CAPTURE": "on-demand"}
    )
    assert (cfg.scheduler_job, cfg.scheduler_key, cfg.via_daemon) == ("slurm-5", "slurm:5", True)
    assert not config.load({}).via_daemon
    with pytest.raises(UsageError):
        config.load({"TFPROF_RELAY": "nobody"})


def test_env_prints_exports_a_posix_shell_reads_back(tmp_path: Path) -> None:
    boot = str(tmp_path / "it's here")
    env = daemon_env.daemon_environment(str(tmp_path / "a.sock"), boot, "job-1", "periodic:2s/60s")
    script = daemon_env.render_sh(env) + 'printf "%s\\n" "$PYTHONPATH" "$TFPROF_CUPTI_PATH"'
    out = subprocess.run(["sh", "-c", script], env={"PYTHONPATH": "/mine"}, capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    assert out.splitlines() == [f"{boot}:/mine", f"{boot}/cupti-python/{{abi}}"]
    alone = subprocess.run(["sh", "-c", daemon_env.render_sh(env) + 'echo "$PYTHONPATH"'], env={},
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert alone == f"{boot}\n"  # no trailing ':' (that would put the cwd on the path)
    for bad in ("sometimes", "periodic:2s", "on-demand;rm"):
        with pytest.raises(UsageError):
            daemon_env.daemon_environment("s", "b", capture=bad)
    with pytest.raises(UsageError):
        daemon_env.daemon_environment("s", "b", job="no/slash")


def test_the_daemon_trusts_no_name_a_hook_sends() -> None:
    assert daemon.identify({"job": "ok", "run_id": "r1"}) == ("ok", "r1")
    job, run = daemon.identify({"job": "../etc", "run_id": "", "pid": 4})
    assert is_safe_name(job) and is_safe_name(run)
    assert daemon.identify({})[0] == "unnamed"  # a hook of an older release


def test_a_live_socket_is_refused_and_a_dead_one_replaced(tmp_path: Path) -> None:
    path = str(tmp_path / "agent.sock")
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    live.bind(path)
    live.listen(1)
    with pytest.raises(UsageError, match="another tfprof daemon"):
        daemon.claim_socket(path)
    live.close()  # the file stays, nobody listens
    daemon.claim_socket(path)
    assert not Path(path).exists()
