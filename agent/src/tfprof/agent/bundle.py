"""The bootstrap folder the launcher puts first on the job's ``PYTHONPATH``.

A job may run under any Python: the system ``python3``, a conda env, a venv without
tfprof. The folder therefore carries what the in-process hook needs, copied from this
installation into the run's scratch directory:

- ``sitecustomize.py``, the only importable name in the folder;
- ``hook-lib/tfprof/...``: the hook and every first-party module it imports (all
  standard library only), found by reading imports from ``tfprof.agent.hook`` on. The
  folder name is not a valid module name, so nothing in it can shadow a package of the
  job; sitecustomize appends it to ``sys.path`` only when the job's own environment has
  no tfprof hook of its own;
- ``cupti-python/``, for CUPTI runs only: links to the launcher's cupti-python and its
  requirements, which a job without cupti-python of its own may use when its
  interpreter's ABI matches the launcher's (``sources.cupti.interpreter_abi``).
"""

from __future__ import annotations

import ast
import importlib.util
import re
import shutil
from importlib import metadata
from pathlib import Path

HOOK_ENTRY = "tfprof.agent.hook"
SITECUSTOMIZE = Path(__file__).resolve().parent / "bootstrap" / "sitecustomize.py"
LIB_DIR = "hook-lib"  # must match sitecustomize.py
CUPTI_DIR = "cupti-python"
CUPTI_DISTRIBUTION = "cupti-python"
DEMO = "demo"  # --source replay:demo
DEMO_TRACE = "simple_add.json.gz"


def _imported_names(source: str, module: str) -> set[str]:
    """Every ``tfprof.*`` module ``module`` may import (also inside functions)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            # `from tfprof.agent import hook` imports a module; `import X` a name: both
            # are tried, and only those that exist as files are kept.
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {n for n in names if n.split(".")[0] == "tfprof" and n != module}


def _origin(module: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def hook_modules() -> dict[str, Path]:
    """The hook's first-party modules and their packages, by name, with their files."""
    found: dict[str, Path] = {}
    todo = [HOOK_ENTRY]
    while todo:
        module = todo.pop()
        parts = module.split(".")
        # A module's packages run first; `tfprof` itself is a namespace (no file).
        for depth in range(2, len(parts) + 1):
            name = ".".join(parts[:depth])
            if name in found:
                continue
            path = _origin(name)
            if path is None:
                continue
            found[name] = path
            todo.extend(_imported_names(path.read_text(encoding="utf-8"), name))
    return found


def _copy_hook_lib(lib: Path) -> None:
    for name, path in hook_modules().items():
        relative = Path(*name.split("."))
        target = lib / (
            relative / "__init__.py" if path.name == "__init__.py" else relative.with_suffix(".py")
        )
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


def link_cupti_python(folder: Path) -> bool:
    """Link the launcher's cupti-python and what it requires into ``folder``."""
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
                target.symlink_to(source)
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
    return str(Path(__file__).resolve().parent / "demo" / DEMO_TRACE)
