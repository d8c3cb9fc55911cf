"""The host-side switches (TFPROF_API, TFPROF_NVTX, TFPROF_MEMORY, TFPROF_TORCH_OPS), the
NVTX injection variable the launcher and the hook set, and the PyTorch import hook.

The NVTX tests load the real libcupti of the installed cupti-python wheel (it loads
without a driver); the PyTorch hook is driven by a stand-in top-level module named
``torch`` in a temporary folder, since PyTorch is not installed here: they prove that the
hook fires once torch's own code has run and that a failure is one line, not that
PyTorch's NVTX ranges come out (that needs PyTorch and a GPU).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tfprof.agent import cli
from tfprof.agent.inprocess import config
from tfprof.agent.inprocess.errors import ConfigError
from tfprof.agent.inprocess.sources.cupti import CuptiSource
from tfprof.agent.inprocess.sources.cupti_loading import libcupti_path

LIBCUPTI = libcupti_path()
NVTX = config.NVTX_INJECTION_VARIABLE


def test_host_side_is_on_by_default_torch_ops_off() -> None:
    cfg = config.load({})
    assert (cfg.api, cfg.nvtx, cfg.memory, cfg.torch_ops) == (True, True, True, False)


@pytest.mark.parametrize(("raw", "value"), [("off", False), ("0", False), ("No", False),
                                            ("on", True), ("1", True), ("TRUE", True)])  # fmt: skip
def test_switches_read_on_and_off_spellings(raw: str, value: bool) -> None:
    cfg = config.load({"TFPROF_API": raw, "TFPROF_MEMORY": raw, "TFPROF_TORCH_OPS": raw})
    assert (cfg.api, cfg.memory, cfg.torch_ops) == (value, value, value)


def test_a_bad_switch_value_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"^TFPROF_NVTX='maybe': expected on or off$"):
        config.load({"TFPROF_NVTX": "maybe"})


def test_flags_set_the_variables() -> None:
    args = cli.build_parser().parse_args(
        ["run", "--api", "off", "--nvtx", "off", "--memory", "on", "--torch-ops", "on", "x"]
    )
    env = config.with_flags(cli._flags(args), {})
    assert env["TFPROF_API"] == "off"
    cfg = config.load(env)
    assert (cfg.api, cfg.nvtx, cfg.memory, cfg.torch_ops) == (False, False, True, True)


def test_the_flags_refuse_other_values() -> None:
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["run", "--api", "sometimes", "x"])


def child(environ: dict[str, str], libcupti: str) -> dict[str, str]:
    return config.child_environment(
        environ, bootstrap_dir="/b", job="j", source="cupti", run_id="r", run_dir="/d",
        socket="/s", libcupti=libcupti,
    )  # fmt: skip


def test_the_job_gets_nvtx_pointed_at_cupti_pythons_libcupti() -> None:
    env = child({}, "/x/libcupti.so.13")
    assert env[NVTX] == "/x/libcupti.so.13"
    assert config.load(env).nvtx_injection == "/x/libcupti.so.13"


def test_a_users_own_injection_and_nvtx_off_are_respected() -> None:
    assert child({NVTX: "/nsys/libinj.so"}, "/x/libcupti.so.13")[NVTX] == "/nsys/libinj.so"
    assert NVTX not in child({"TFPROF_NVTX": "off"}, "/x/libcupti.so.13")
    assert NVTX not in child({}, "")  # no libcupti (no CUDA here): nothing said or set


@pytest.mark.skipif(not LIBCUPTI, reason="no nvidia-cuda-cupti wheel installed")
def test_libcupti_path_is_the_installed_wheels_library() -> None:
    assert os.path.isfile(LIBCUPTI)
    assert os.path.basename(LIBCUPTI).startswith("libcupti.so")


POINT_HERE = """
import ctypes, json, os, sys
from tfprof.agent.inprocess.sources.cupti import CuptiSource
from tfprof.agent.inprocess.sources.cupti_loading import loaded_libcupti
ctypes.CDLL(sys.argv[1])  # what cupti-python does when CUPTI is first called
CuptiSource(launcher_nvtx=sys.argv[2]).point_nvtx_here()
print(json.dumps([loaded_libcupti(), os.environ.get("NVTX_INJECTION64_PATH", "")]))
"""


def point_here(env_value: str | None, launcher_value: str) -> tuple[str, str]:
    env = {k: v for k, v in os.environ.items() if k != NVTX}
    if env_value is not None:
        env[NVTX] = env_value
    done = subprocess.run(
        [sys.executable, "-c", POINT_HERE, LIBCUPTI, launcher_value],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    loaded, value = json.loads(done.stdout)
    return loaded, value


@pytest.mark.skipif(not LIBCUPTI, reason="no nvidia-cuda-cupti wheel installed")
def test_the_hook_points_nvtx_at_the_libcupti_it_loaded() -> None:
    loaded, value = point_here(None, "")
    assert loaded == os.path.realpath(LIBCUPTI)
    assert value == loaded
    # The launcher's guess (another cupti-python's library) is corrected...
    assert point_here("/launcher/libcupti.so.13", "/launcher/libcupti.so.13")[1] == loaded
    # ...a value the user set is not.
    assert point_here("/nsys/libinj.so", "/launcher/libcupti.so.13")[1] == "/nsys/libinj.so"


def test_switches_reach_the_cupti_source() -> None:
    from tfprof.agent.inprocess import source_arming

    cfg = config.load({"TFPROF_SOURCE": "cupti", "TFPROF_API": "off", "TFPROF_MEMORY": "off",
                       "TFPROF_NVTX_INJECTION": "/x/libcupti.so"})  # fmt: skip
    source = source_arming.pick_source(cfg)
    assert isinstance(source, CuptiSource)
    assert (source.api, source.markers, source.memory) == (False, True, False)
    assert source.launcher_nvtx == "/x/libcupti.so"


# -- the PyTorch import hook ----------------------------------------------------------

WATCH = """
import sys
from tfprof.agent.inprocess import post_import, torch_ops
from tfprof.agent.inprocess.hook import warn
torch_ops.install(warn)
print("before", "torch" in sys.modules, flush=True)
import json  # other imports go through untouched
import torch
print("after", torch.loaded_by_its_own_code, type(torch.__loader__).__name__, flush=True)
print("watchers", sum(isinstance(f, post_import.PostImportFinder) for f in sys.meta_path))
"""


def fake_torch(tmp_path: Path, body: str) -> Path:
    package = tmp_path / "torch"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(body))
    return tmp_path


def run_watch(folder: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), *sys.path])}
    return subprocess.run(
        [sys.executable, "-c", WATCH], env=env, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip


def test_the_torch_hook_fires_after_torch_loaded_and_enables_nvtx_profiling(
    tmp_path: Path,
) -> None:
    # A stand-in with the names emit_nvtx uses, recording how it is called.
    folder = fake_torch(
        tmp_path,
        """
        import sys, types
        loaded_by_its_own_code = True
        calls = []
        profiler = types.ModuleType("torch.autograd.profiler")
        profiler.ProfilerState = types.SimpleNamespace(NVTX="NVTX")
        profiler.ProfilerConfig = lambda *args: args
        profiler._ExperimentalConfig = lambda: "experimental"
        profiler._run_on_profiler_start = lambda: calls.append("start")
        profiler._enable_profiler = lambda config, activities: calls.append((config, activities))
        autograd = types.ModuleType("torch.autograd")
        autograd.profiler = profiler
        sys.modules["torch.autograd"] = autograd
        sys.modules["torch.autograd.profiler"] = profiler
        import atexit
        atexit.register(lambda: print("calls", calls))
    """,
    )
    done = run_watch(folder)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "before False"
    assert lines[1] == "after True SourceFileLoader"  # torch sees its own loader
    assert lines[2] == "watchers 0"  # the watcher is gone once torch is imported
    expected: list[object] = [
        "start",
        (("NVTX", False, False, False, False, False, "experimental"), set()),
    ]
    assert lines[3] == f"calls {expected}"
    assert done.stderr == ""


def test_a_torch_without_the_profiler_api_costs_one_line(tmp_path: Path) -> None:
    folder = fake_torch(
        tmp_path,
        """
        __version__ = "0.4.1"
        loaded_by_its_own_code = True
    """,
    )
    done = run_watch(folder)
    assert done.returncode == 0, done.stderr
    assert "after True" in done.stdout
    (line,) = done.stderr.splitlines()
    assert line.startswith("tfprof: could not turn on PyTorch op ranges (torch 0.4.1: ")
    assert line.endswith("kernels are not attributed to ops")


def test_a_torch_that_fails_to_import_is_the_jobs_own_error(tmp_path: Path) -> None:
    folder = fake_torch(tmp_path, "raise ImportError('libtorch_cuda.so: not found')\n")
    done = run_watch(folder)
    assert done.returncode == 1
    assert "ImportError: libtorch_cuda.so: not found" in done.stderr
    assert "tfprof:" not in done.stderr
