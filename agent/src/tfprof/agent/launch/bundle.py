"""The bootstrap folder the launcher puts first on the job's ``PYTHONPATH``.

A job may run under any Python: the system ``python3``, a conda env, a venv without
tfprof. The folder therefore carries what the in-process hook needs, copied from this
installation into the run's scratch directory:

- ``sitecustomize.py``, the only importable name in the folder;
- ``hook-lib/tfprof/...``: the in-process packages, whole (``IN_PROCESS_PACKAGES``: the
  hook and its sources, the shared vocabulary, the trace readers). The folder name is
  not a valid module name, so nothing in it can shadow a package of the job;
  sitecustomize appends it to ``sys.path`` only when the job's own environment has no
  tfprof hook of its own;
- ``cupti-python/``, for CUPTI runs only: links to the launcher's cupti-python and its
  requirements, which a job without cupti-python of its own may use when its
  interpreter's ABI matches the launcher's (``sources.cupti_loading.interpreter_abi``).

``tfprof-agent bundle DIR`` (``write_bundle``) writes the same folder for jobs that no
launcher starts (the node daemon's, a pod mounting it read-only): real copies instead of
links, and cupti-python under ``cupti-python/<ABI>/`` for each ABI asked for whose
cupti-python is installed here; the hook picks its own ABI's folder.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sysconfig
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path

from tfprof.agent.inprocess.sources.cupti_loading import interpreter_abi

# What runs inside the job's process, shipped whole to whatever interpreter the job uses.
# This is the one definition of the in-process boundary: pyproject.toml holds these
# folders to Python 3.9 (ruff's per-file-target-version) and tests/unit/test_layers.py
# checks both that table and that these packages import only each other and the standard
# library.
IN_PROCESS_PACKAGES = ("tfprof.agent.inprocess", "tfprof.core", "tfprof.readers")
SITECUSTOMIZE = Path(__file__).resolve().parents[1] / "bootstrap" / "sitecustomize.py"
LIB_DIR = "hook-lib"  # must match sitecustomize.py
CUPTI_DIR = "cupti-python"
CUPTI_DISTRIBUTION = "cupti-python"
DEMO = "demo"  # --source replay:demo
DEMO_TRACE = "simple_add.json.gz"


def in_process_files() -> dict[Path, Path]:
    """Every file the job's interpreter needs, by its path under the hook folder: the
    in-process packages whole, and the ``tfprof.agent`` package file above them."""
    files: dict[Path, Path] = {}
    for package in ("tfprof.agent", *IN_PROCESS_PACKAGES):
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(f"tfprof is installed without its package {package}")
        folder = Path(next(iter(spec.submodule_search_locations)))
        relative = Path(*package.split("."))
        if package == "tfprof.agent":
            files[relative / "__init__.py"] = folder / "__init__.py"
            continue
        for path in folder.rglob("*.py"):
            files[relative / path.relative_to(folder)] = path
    return files


def _copy_hook_lib(lib: Path) -> None:
    for relative, path in in_process_files().items():
        target = lib / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


def _top_level_names(dist: metadata.Distribution) -> set[str]:
    names: set[str] = set()
    for file in dist.files or ():
        first = file.parts[0] if file.parts else ""
        if first not in ("", "..", "__pycache__") and not first.endswith(
            (".dist-info", ".egg-info")
        ):
            names.add(first)
    return names


def _requirement_name(requirement: str) -> str | None:
    """The distribution a requirement names, or None when it applies only with an extra."""
    if re.search(r"\bextra\s*==", requirement):
        return None
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return match.group(1) if match else None


def _link(source: Path, target: Path) -> None:
    target.symlink_to(source)


def _copy(source: Path, target: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        shutil.copy2(source, target)


def link_cupti_python(folder: Path, place: Callable[[Path, Path], None] = _link) -> bool:
    """Link (or with ``place=_copy``, copy) this installation's cupti-python and what it
    requires into ``folder``."""
    seen: set[str] = set()
    todo = [CUPTI_DISTRIBUTION]
    linked = False
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for top in _top_level_names(dist):
            source, target = Path(str(dist.locate_file(top))), folder / top
            if source.exists() and not target.exists():
                folder.mkdir(parents=True, exist_ok=True)
                place(source, target)
                linked = True
        todo.extend(n for n in map(_requirement_name, dist.requires or ()) if n)
    return linked


def build(run_dir: str, *, with_cupti: bool) -> tuple[str, str]:
    """Make the run's bootstrap folder; (that folder, the cupti-python folder or "")."""
    folder = Path(run_dir) / "bootstrap"
    folder.mkdir()
    shutil.copyfile(SITECUSTOMIZE, folder / "sitecustomize.py")
    _copy_hook_lib(folder / LIB_DIR)
    cupti = folder / CUPTI_DIR
    if with_cupti and link_cupti_python(cupti):
        return str(folder), str(cupti)
    return str(folder), ""


def demo_trace() -> str:
    """The real GPU trace ``--source replay:demo`` replays (package data)."""
    return str(Path(__file__).resolve().parents[1] / "demo" / DEMO_TRACE)


def abi_name(wanted: str) -> str:
    """A full ABI (``interpreter_abi``'s form: ``cpython-311-linux-x86_64``) for what the
    user typed: that form itself, or a wheel tag such as ``cp311`` (``cp313t``: the
    free-threaded build) on this platform."""
    match = re.fullmatch(r"cp(\d)(\d+)(t?)", wanted)
    if match is None:
        return wanted
    major, minor, threaded = match.groups()
    return f"cpython-{major}{minor}{threaded}-{sysconfig.get_platform()}"


def write_bundle(target: str, abis: Sequence[str] = ()) -> list[str]:
    """Write the self-contained bootstrap folder at ``target`` (replacing one there);
    the lines to tell the user (an ABI without cupti-python here).

    Written beside and renamed into place, so a pod never sees half a folder.
    """
    final = Path(target).resolve()
    final.parent.mkdir(parents=True, exist_ok=True)
    work = final.parent / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    notes: list[str] = []
    try:
        shutil.copyfile(SITECUSTOMIZE, work / "sitecustomize.py")
        _copy_hook_lib(work / LIB_DIR)
        for abi in dict.fromkeys(abi_name(a) for a in abis):
            if abi != interpreter_abi():
                notes.append(
                    f"no cupti-python for {abi} here (this tfprof runs {interpreter_abi()}): the "
                    "bundle has none for it; jobs with their own cupti-python are traced anyway"
                )
            elif not link_cupti_python(work / CUPTI_DIR / abi, place=_copy):
                notes.append(
                    f"cupti-python is not installed here: the bundle has none for {abi} "
                    "(pip install cupti-python, then bundle again)"
                )
        _readable_by_all(work)
        old = final.parent / f".{final.name}.old-{os.getpid()}"
        if final.exists():
            final.rename(old)
        work.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return notes


def _readable_by_all(folder: Path) -> None:
    """Every traced process, whoever runs it, imports the hook from here: folders 0755,
    files 0644 (executables 0755), whatever the writer's umask (a daemon unit's is
    tight). Writable by its owner alone: code in it runs in every job."""
    for dirpath, _dirnames, filenames in os.walk(folder):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                continue
            executable = os.stat(path).st_mode & 0o111
            os.chmod(path, 0o755 if executable else 0o644)


def cupti_path_in(bootstrap_dir: str) -> str:
    """``TFPROF_CUPTI_PATH`` for jobs using the bundle at ``bootstrap_dir``."""
    return os.path.join(bootstrap_dir, CUPTI_DIR, "{abi}")
