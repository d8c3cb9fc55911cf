"""The bootstrap folder: what it holds, that the hook runs from it alone, the demo trace."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tfprof.agent.inprocess.config import load
from tfprof.agent.inprocess.sources.base import SourceUnavailable
from tfprof.agent.inprocess.sources.cupti_loading import (
    import_cupti,
    interpreter_abi,
    not_installed,
)
from tfprof.agent.launch import bundle
from tfprof.agent.launch.prestart import resolve_source


def test_the_bundle_ships_the_in_process_packages_and_nothing_else() -> None:
    files = {path.as_posix() for path in bundle.in_process_files()}
    for needed in (
        "tfprof/agent/__init__.py", "tfprof/agent/inprocess/hook.py",
        "tfprof/agent/inprocess/frames.py", "tfprof/agent/inprocess/config.py",
        "tfprof/agent/inprocess/sources/replay.py", "tfprof/agent/inprocess/sources/cupti.py",
        "tfprof/core/records.py", "tfprof/readers/__init__.py", "tfprof/readers/kineto.py",
    ):  # fmt: skip
        assert needed in files
    outside = ("tfprof/agent/launch", "tfprof/agent/relay", "tfprof/agent/cli.py")
    assert not [f for f in files if f.startswith((*outside, "tfprof/collector", "tfprof/proto"))]


def test_the_folder_holds_one_importable_name(tmp_path: Path) -> None:
    folder, cupti = bundle.build(str(tmp_path), with_cupti=False)
    assert cupti == ""
    assert sorted(p.name for p in Path(folder).iterdir()) == [bundle.LIB_DIR, "sitecustomize.py"]
    assert not bundle.LIB_DIR.isidentifier()  # `import hook-lib` is not even syntax


def test_the_hook_runs_from_the_folder_alone(tmp_path: Path) -> None:
    folder, _ = bundle.build(str(tmp_path), with_cupti=False)
    lib = Path(folder) / bundle.LIB_DIR
    # -I -S: no site-packages, no PYTHONPATH; sys.path is the stdlib and the folder.
    code = (
        "import sys; sys.path.append(sys.argv[1]); "
        "import tfprof.agent.inprocess.hook, tfprof.agent.inprocess.sources.replay; "
        "import tfprof.agent.inprocess.sources.cupti; "
        "from tfprof.readers import load_trace; "
        "print(len(load_trace(sys.argv[2]).columns['kind']))"
        "; print(sorted({m.__file__.startswith(sys.argv[1]) for n, m in sys.modules.items() "
        "if n.startswith('tfprof.')}))"
    )
    run = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, str(lib), bundle.demo_trace()],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    count, where = run.stdout.splitlines()
    assert int(count) > 0
    assert where == "[True]"  # every tfprof module came from the folder


def test_cupti_python_is_linked_with_its_requirements(tmp_path: Path) -> None:
    pytest.importorskip("cupti")
    folder = tmp_path / "cupti"
    assert bundle.link_cupti_python(folder)
    names = {p.name for p in folder.iterdir()}
    assert {"cupti", "cuda", "numpy"} <= names
    assert all((folder / n).is_symlink() for n in names)


def test_replay_demo_is_the_shipped_real_trace() -> None:
    demo = Path(bundle.demo_trace())
    assert demo.is_file() and (demo.parent / "LICENSE").is_file()
    shipped = Path(__file__).resolve().parents[1] / "data/traces/kineto-hta" / bundle.DEMO_TRACE
    assert demo.read_bytes() == shipped.read_bytes()  # byte for byte, as its README says
    assert resolve_source(load({"TFPROF_SOURCE": "replay:demo"})) == f"replay:{demo}"


def test_interpreter_abi_names_version_and_platform() -> None:
    abi = interpreter_abi()
    assert abi.startswith(f"cpython-{sys.version_info[0]}{sys.version_info[1]}")
    assert abi.endswith(sysconfig.get_platform())


def test_missing_cupti_python_names_the_pip_command_for_this_python(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "cupti", None)  # import cupti -> ImportError
    with pytest.raises(SourceUnavailable) as info:
        import_cupti()
    assert str(info.value) == not_installed()
    with pytest.raises(SourceUnavailable) as info:
        import_cupti(str(tmp_path), "cpython-27-other")
    message = str(info.value)
    assert "the launcher's is built for cpython-27-other, not " + interpreter_abi() in message
    assert f"`{sys.executable} -m pip install cupti-python`" in message
    assert str(tmp_path) not in sys.path  # a launcher copy it cannot load is not added
