"""Which job a process belongs to when no launcher names it (the node daemon's case).

A process started with ``tfprof-agent env`` exports has no launcher to pick its job
name and run id, so the hook works them out itself, the same way in every process of
the job: ``TFPROF_JOB`` (and ``TFPROF_RUN_ID``) when set, else the scheduler's job
(Slurm, torchelastic, MPI through PMIx, a Kubernetes pod), else the command. The run id
is derived from the scheduler's job id, so ranks that srun, torchrun or mpirun start
separately land in one run; without a scheduler it is random, and the first traced
process exports both to its descendants (``config.export_identity``), so a launcher
written in Python (torchrun, multiprocessing) keeps its workers in its run.
Imported inside user processes: standard library only; the environment comes in as a
mapping (``config`` is the module that reads it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import NamedTuple

# Kubernetes exposes neither to a container by itself: the pod spec maps them in with
# the downward API (deploy/kubernetes/training-pod.yaml). Ours first, then the names
# most charts already use.
POD_NAME_VARIABLES = ("TFPROF_POD_NAME", "POD_NAME")
POD_NAMESPACE_VARIABLES = ("TFPROF_POD_NAMESPACE", "POD_NAMESPACE")

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
MAX_NAME = 64


class SchedulerJob(NamedTuple):
    name: str  # a safe job name
    key: str  # what every process of the job shares; the run id derives from it


def safe_name(text: str, fallback: str = "job") -> str:
    """``text`` made a valid job name (``tfprof.core.names``): other characters become
    ``-``; too long a name keeps its start and a hash of the whole, so two long names
    stay apart."""
    name = _UNSAFE.sub("-", text).strip("-._")
    if not name:
        return fallback
    if len(name) > MAX_NAME:
        digest = _sha256_hex(name)[:8]
        name = name[: MAX_NAME - 9].rstrip("-._") + "-" + digest
    return name


def _first(environ: Mapping[str, str], names: Sequence[str]) -> str:
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return value
    return ""


def scheduler_job(environ: Mapping[str, str]) -> SchedulerJob | None:
    """The job the scheduler runs this process for, or None.

    Slurm first (every step and task of a job shares ``SLURM_JOB_ID``), then
    torchelastic (``TORCHELASTIC_RUN_ID`` spans every node of a torchrun job; torchrun's
    placeholder ``none`` does not count), then MPI (``PMIX_NAMESPACE``, set by Open MPI
    and PMIx launchers for every rank), then the Kubernetes pod.
    """
    slurm = environ.get("SLURM_JOB_ID", "").strip()
    if slurm:
        label = environ.get("SLURM_JOB_NAME", "").strip()
        name = f"{label}-{slurm}" if label else f"slurm-{slurm}"
        return SchedulerJob(safe_name(name), f"slurm:{slurm}")
    elastic = environ.get("TORCHELASTIC_RUN_ID", "").strip()
    if elastic and elastic != "none":
        return SchedulerJob(safe_name(f"torchelastic-{elastic}"), f"torchelastic:{elastic}")
    pmix = environ.get("PMIX_NAMESPACE", "").strip()
    if pmix:
        return SchedulerJob(safe_name(f"mpi-{pmix}"), f"pmix:{pmix}")
    pod = _first(environ, POD_NAME_VARIABLES)
    if pod:
        namespace = _first(environ, POD_NAMESPACE_VARIABLES) or "default"
        return SchedulerJob(safe_name(f"{namespace}.{pod}"), f"pod:{namespace}/{pod}")
    return None


def command_name(argv: Sequence[str]) -> str:
    """The job name a bare command gives: ``python train.py`` is ``train``,
    ``python -m pkg.mod`` is ``pkg.mod``."""
    words = list(argv)
    base = os.path.basename(words[0]) if words else ""
    if re.match(r"python[0-9.]*$", base):
        rest = words[1:]
        while rest and rest[0].startswith("-"):
            option = rest.pop(0)
            if option == "-m" and rest:
                return safe_name(rest[0])
            if option == "-c":
                return "python-c"
        base = os.path.basename(rest[0]) if rest else base
    return safe_name(re.sub(r"\.py$", "", base))


def _sha256_hex(text: str) -> str:
    # Imported on use: hashlib (OpenSSL) would cost every traced process's start-up
    # (bench/results/cpu-design-choices.txt), and most processes never hash (a launcher
    # names the job and run).
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


def run_id(key: str) -> str:
    """A run id every process sharing ``key`` computes alike (12 hex digits)."""
    return _sha256_hex(key)[:12]


def resolve(
    job: str, given_run_id: str, scheduler: SchedulerJob | None, argv: Sequence[str]
) -> tuple[str, str]:
    """(job name, run id) of a process the launcher did not name. Without a scheduler
    the run id is new (the caller hands it down to the process's descendants)."""
    name = job or (scheduler.name if scheduler else "") or command_name(argv)
    if given_run_id:
        return name, given_run_id
    if scheduler is None:
        return name, os.urandom(6).hex()
    return name, run_id(f"{name}|{scheduler.key}")
