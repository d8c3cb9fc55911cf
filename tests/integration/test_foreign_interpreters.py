"""Jobs run by a Python that has no tfprof installed: venvs of other CPython versions,
``bash -c "python3 ..."``, Python 2. They are traced through the launcher's bootstrap
folder (``tfprof.agent.launch.bundle``) or told in one line why not, and nothing else changes.

The interpreters are pyenv's (skipped where absent); each venv is made here with
``python -m venv`` and never has tfprof in it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tfprof.agent.inprocess.sources.cupti_loading import interpreter_abi
from tfprof.agent.launch import bundle

from .agent_runs import run_agent, traced_pids
from .conftest import (
    REPO,
    Collector,
    clean_env,
    collector_cmd,
    expected_tracks,
    gpu_tracks,
    load_trace_file,
    track_counts,
)

PYENV = Path("/root/.pyenv/versions")
FOREIGN_VERSIONS = ["3.9.18", "3.10.13", "3.12.1", "3.13.0"]
DEMO = Path(bundle.demo_trace())
REPLAY_DEMO = ("--source", "replay:demo", "--replay-speed", "max")
# What the job sees of tfprof: where the hook came from, and that sys.path ends with it.
PROBE = (
    "import sys; hook = sys.modules.get('tfprof.agent.inprocess.hook'); "
    "print(hook.__file__ if hook else 'no hook'); print(sys.path[-1])"
)


# The launcher is a Python process too: only the job's processes have TFPROF_SOCKET.
USER_SITECUSTOMIZE = (
    "import os, sys\nif os.environ.get('TFPROF_SOCKET'): sys.stdout.write('user site\\n')\n"
)


def pyenv_python(version: str) -> Path:
    python = PYENV / version / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no Python {version} here ({python})")
    return python


@pytest.fixture(scope="module")
def venvs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Venvs without tfprof (nor pip: nothing is installed in them), made on demand."""
    root = tmp_path_factory.mktemp("foreign-venvs")

    class Venvs(dict[str, Path]):
        def __missing__(self, version: str) -> Path:
            target = root / version
            subprocess.run(
                [str(pyenv_python(version)), "-m", "venv", "--without-pip", str(target)],
                check=True,
                timeout=120,
            )
            python = target / "bin" / "python"
            has = subprocess.run(
                [str(python), "-c", "import tfprof"], env=clean_env(), capture_output=True
            )
            assert has.returncode != 0, "the venv must not see tfprof"
            self[version] = python
            return python

    yield Venvs()


def demo_job_counts(out: Path, job: str) -> object:
    slices, _ = track_counts(load_trace_file(out))
    return gpu_tracks(slices, job)


@pytest.mark.parametrize("version", FOREIGN_VERSIONS)
def test_a_venv_without_tfprof_is_traced(
    version: str, venvs: dict[str, Path], tmp_path: Path
) -> None:
    python = venvs[version]
    out = tmp_path / "t.json"
    run = run_agent(
        tmp_path, *REPLAY_DEMO, "--job", "foreign", "-o", str(out), "--",
        str(python), "-c", PROBE,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "not traced" not in run.stderr and "Traceback" not in run.stderr, run.stderr
    hook_file, last_path = run.stdout.splitlines()
    # The hook came from the run's bootstrap folder, appended last: it shadows nothing.
    assert f"{os.sep}{bundle.LIB_DIR}{os.sep}" in hook_file
    assert last_path.endswith(bundle.LIB_DIR)
    assert demo_job_counts(out, "foreign") == expected_tracks(DEMO, "/job:foreign")


def test_a_foreign_venv_streams_to_a_real_collector(
    venvs: dict[str, Path], collector: Collector, tmp_path: Path
) -> None:
    python = venvs["3.12.1"]
    run = run_agent(
        tmp_path, *REPLAY_DEMO, "--job", "remote-foreign", "--collector", collector.address,
        "--", str(python), "-c", "print('ok')",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout == "ok\n" and "not traced" not in run.stderr, run.stderr
    out = tmp_path / "stored.json"
    export = subprocess.run(
        collector_cmd("export", "--data-dir", str(collector.data_dir), "-o", str(out)),
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert export.returncode == 0, export.stderr
    assert demo_job_counts(out, "remote-foreign") == expected_tracks(DEMO, "/job:remote-foreign")


def test_bash_dash_c_python3_of_a_foreign_venv_is_traced(
    venvs: dict[str, Path], tmp_path: Path
) -> None:
    python = venvs["3.10.13"]
    env = clean_env(PATH=f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    out = tmp_path / "b.json"
    script = "import os, sys; print(os.getpid(), sys.version_info[:2])"
    run = run_agent(
        tmp_path, *REPLAY_DEMO, "--job", "shell", "-o", str(out), "--",
        "bash", "-c", f'python3 -c "{script}"', env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    pid, version = run.stdout.split(" ", 1)
    assert version.strip() == "(3, 10)"
    assert int(pid) in traced_pids(out)
    assert demo_job_counts(out, "shell") == expected_tracks(DEMO, "/job:shell")


def test_the_jobs_own_tfprof_is_used_not_shadowed(tmp_path: Path) -> None:
    # This test's interpreter has tfprof installed: its hook must be the one that runs.
    out = tmp_path / "own.json"
    run = run_agent(tmp_path, "--source", "none", "-o", str(out), "--", sys.executable, "-c", PROBE)
    assert run.returncode == 0, run.stderr
    hook_file, last_path = run.stdout.splitlines()
    assert (
        Path(hook_file).resolve() == (REPO / "agent/src/tfprof/agent/inprocess/hook.py").resolve()
    )
    assert not last_path.endswith(bundle.LIB_DIR)
    assert traced_pids(out)


def test_user_sitecustomize_still_runs_under_a_foreign_python(
    venvs: dict[str, Path], tmp_path: Path
) -> None:
    user_site = tmp_path / "usersite"
    user_site.mkdir()
    (user_site / "sitecustomize.py").write_text(USER_SITECUSTOMIZE)
    out = tmp_path / "s.json"
    run = run_agent(
        tmp_path, "--source", "none", "-o", str(out), "--", str(venvs["3.9.18"]), "-c",
        "print('job')", env=clean_env(PYTHONPATH=str(user_site)),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout == "user site\njob\n"
    assert traced_pids(out)


def test_python2_is_one_line_untraced_and_unharmed(tmp_path: Path) -> None:
    python2 = pyenv_python("2.7.18")
    user_site = tmp_path / "usersite"
    user_site.mkdir()
    (user_site / "sitecustomize.py").write_text(USER_SITECUSTOMIZE)
    out = tmp_path / "p2.json"
    run = run_agent(
        tmp_path, *REPLAY_DEMO, "-o", str(out), "--", str(python2), "-c",
        "import sys; print('py2 job'); sys.exit(4)", env=clean_env(PYTHONPATH=str(user_site)),
    )  # fmt: skip
    assert run.returncode == 4, run.stderr  # the job's own status
    assert run.stdout == "user site\npy2 job\n"
    told = [line for line in run.stderr.splitlines() if "not traced" in line]
    assert told == [
        f"tfprof: {python2} is python 2.7.18: tfprof traces CPython 3.9 or newer; not traced"
    ]
    assert "Traceback" not in run.stderr
    assert not traced_pids(out)


@pytest.mark.skipif(os.path.exists("/dev/nvidia0"), reason="this machine has a GPU")
def test_cupti_python_comes_from_the_launcher_only_when_the_abi_matches(
    venvs: dict[str, Path], tmp_path: Path
) -> None:
    pytest.importorskip("cupti")  # the launcher's own cupti-python
    same = f"{sys.version_info[0]}.{sys.version_info[1]}"
    matching = next((v.name for v in PYENV.glob(f"{same}.*")), None)
    if matching is None:
        pytest.skip(f"no pyenv Python {same} (the launcher's version) here")
    for version, expect_fallback in ((matching, True), ("3.12.1", False)):
        python = venvs[version]
        out = tmp_path / f"c-{version}.json"
        run = run_agent(
            tmp_path, "--source", "cupti", "-o", str(out), "--", str(python), "-c", "print('ok')"
        )
        assert run.returncode == 0 and run.stdout == "ok\n", run.stderr
        assert "Traceback" not in run.stderr
        if expect_fallback:
            # The launcher's cupti-python loaded, and found no driver: CUPTI's own story.
            assert "CUDA driver" in run.stderr and "not installed" not in run.stderr, run.stderr
        else:
            told = [line for line in run.stderr.splitlines() if "cupti-python" in line]
            assert len(told) == 1, run.stderr
            assert f"built for {interpreter_abi()}" in told[0]
            assert f"`{python} -m pip install cupti-python`" in told[0]
