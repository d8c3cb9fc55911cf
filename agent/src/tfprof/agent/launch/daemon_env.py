"""``tfprof-agent env``: the environment that makes a process traced by the node daemon.

Any process started with it (torchrun, srun, mpirun, a container, a notebook kernel)
loads the bootstrap's ``sitecustomize``, which starts the hook; the hook connects to the
daemon's socket and works out its job itself (``identity``). Nothing else is needed: no
launcher, no tfprof in the job's environment.
"""

from __future__ import annotations

import json
import re
import shlex

from tfprof.agent.inprocess.config import OPTIONS, validate_job_name
from tfprof.agent.inprocess.errors import UsageError
from tfprof.agent.launch import bundle

CAPTURE_MODES = "always | on-demand | periodic:ON/EVERY (e.g. periodic:2s/60s)"
_DURATION = r"\d+(\.\d+)?(ms|s|m)?"
_CAPTURE = re.compile(rf"always|on-demand|periodic:{_DURATION}/{_DURATION}")


def validate_capture(mode: str) -> str:
    if _CAPTURE.fullmatch(mode) is None:
        raise UsageError(f"--capture {mode!r}: expected {CAPTURE_MODES}")
    return mode


def daemon_environment(
    socket_path: str, bootstrap_dir: str, job: str = "", capture: str = "on-demand"
) -> dict[str, str]:
    """The variables, in the order they are printed; ``PYTHONPATH`` is the bootstrap
    folder alone (``render_sh`` keeps the process's own after it)."""
    env = {
        "PYTHONPATH": bootstrap_dir,
        OPTIONS["relay"].env: "daemon",
        OPTIONS["socket"].env: socket_path,
        "TFPROF_CAPTURE": validate_capture(capture),
        OPTIONS["cupti_path"].env: bundle.cupti_path_in(bootstrap_dir),
    }
    if job:
        env[OPTIONS["job"].env] = validate_job_name(job)
    return env


def render_sh(env: dict[str, str]) -> str:
    """POSIX ``export`` lines; ``PYTHONPATH`` appends whatever the shell already has."""
    lines = []
    for key, value in env.items():
        quoted = shlex.quote(value)
        if key == "PYTHONPATH":
            quoted += '"${PYTHONPATH:+:$PYTHONPATH}"'
        lines.append(f"export {key}={quoted}")
    return "\n".join(lines) + "\n"


def render_json(env: dict[str, str]) -> str:
    """One JSON object; a tool puts ``PYTHONPATH`` before the process's own."""
    return json.dumps(env, indent=2) + "\n"
