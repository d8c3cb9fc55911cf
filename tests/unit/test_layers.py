"""The layers hold: read every first-party module's imports (top level and inside functions).

- the collector never imports the agent;
- the agent imports the collector only through its embedded facade, ``tfprof.collector.embedded``;
- ``tfprof.core`` and ``tfprof.readers`` import neither side nor the generated wire code,
  and the core never imports the readers;
- the in-process packages (``bundle.IN_PROCESS_PACKAGES``, what the bootstrap ships into the
  job's interpreter) import, wherever they import, only each other and, at module level,
  the standard library; pyproject.toml holds exactly their folders to Python 3.9;
- no agent module imports the collector's third-party dependencies at module level.

The imports are read by ``tests/import_graph.py``; ``test_import_graph.py`` checks the
layers inside the collector and the agent, and that no imports form a cycle.
"""

from __future__ import annotations

import sys

import pytest
import tomllib

from tests.import_graph import (
    ROOT,
    SOURCE_ROOTS,
    Import,
    all_imports,
    first_party_modules,
    imports_of,
)
from tfprof.agent.launch import bundle

EMBEDDED_FACADE = "tfprof.collector.embedded"
# The collector's third-party dependencies, none of which a training image needs.
COLLECTOR_ONLY = {
    "numpy", "orjson", "perfetto", "prometheus_client", "rich", "textual", "duckdb", "pyarrow"
}  # fmt: skip
# Imported by the bootstrap in every traced process, before user code.
HOOK_ENTRY = "tfprof.agent.inprocess.hook"
IN_PROCESS = bundle.IN_PROCESS_PACKAGES


def top(name: str) -> str:
    return name.split(".")[0]


def violations(imports: list[Import], modules: set[str]) -> list[str]:
    bad: list[str] = []
    for imp in imports:
        src, dst = imp.module, imp.target
        where = f"{src}:{imp.line} imports {dst}"
        if src.startswith("tfprof.collector") and dst.startswith("tfprof.agent"):
            bad.append(f"{where}: the collector never imports the agent")
        if (
            src.startswith("tfprof.agent")
            and dst.startswith("tfprof.collector")
            and dst != "tfprof.collector"
            and not (dst == EMBEDDED_FACADE or dst.startswith(EMBEDDED_FACADE + "."))
        ):
            bad.append(f"{where}: the agent reaches the collector only via {EMBEDDED_FACADE}")
        if src.startswith(("tfprof.core", "tfprof.readers")) and dst.startswith(
            ("tfprof.agent", "tfprof.collector", "tfprof.proto")
        ):
            bad.append(f"{where}: the core and the readers import neither side nor the wire code")
        if src.startswith("tfprof.core") and dst.startswith("tfprof.readers"):
            bad.append(f"{where}: the core never imports the readers")
        if src.startswith("tfprof.agent") and imp.top_level and top(dst) in COLLECTOR_ONLY:
            bad.append(f"{where}: the agent must not need the collector's dependencies")
    bad.extend(in_process_violations(imports, modules))
    return bad


def in_process(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in IN_PROCESS)


def in_process_violations(imports: list[Import], modules: set[str]) -> list[str]:
    """What the bootstrap ships imports only itself, and the standard library at module
    level (a third-party import inside a function is the optional route it is for)."""
    bad: list[str] = []
    for imp in imports:
        if not in_process(imp.module):
            continue
        where = f"{imp.module}:{imp.line} imports {imp.target}"
        if top(imp.target) == "tfprof":
            if imp.target in modules and not (
                in_process(imp.target) or imp.target == "tfprof.agent"
            ):
                bad.append(f"{where}: in-process code imports only the in-process packages")
        elif imp.top_level and top(imp.target) not in sys.stdlib_module_names:
            bad.append(f"{where} at module level: in-process code is standard library only")
    return bad


def package_folder(package: str) -> str:
    """``tfprof.agent.inprocess`` -> ``agent/src/tfprof/agent/inprocess``."""
    for root in SOURCE_ROOTS:
        folder = root.joinpath(*package.split("."))
        if folder.is_dir():
            return folder.relative_to(ROOT).as_posix()
    raise AssertionError(f"no folder for {package}")


def test_the_in_process_packages_are_held_to_python_39_and_nothing_else_is() -> None:
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"][
        "per-file-target-version"
    ]
    assert table == {f"{package_folder(p)}/**/*.py": "py39" for p in IN_PROCESS}


def test_layers_hold() -> None:
    modules = first_party_modules()
    assert HOOK_ENTRY in modules and len(modules) > 50  # the scan found the tree
    bad = violations(all_imports(modules), set(modules))
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    ("module", "source", "rule"),
    [
        ("tfprof.collector.x", "from tfprof.agent import frames", "never imports the agent"),
        ("tfprof.agent.x", "def f():\n    from tfprof.collector.store import Store",
         "only via"),
        ("tfprof.core.x", "import numpy", "standard library only"),
        ("tfprof.readers.x", "from tfprof.agent.relay import spool", "in-process packages"),
        ("tfprof.core.x", "from tfprof.readers import kineto", "never imports the readers"),
        ("tfprof.core.x", "from tfprof.proto import collector_pb2", "nor the wire code"),
        ("tfprof.agent.x", "import orjson", "collector's dependencies"),
        ("tfprof.agent.inprocess.hook", "import grpc", "standard library only"),
    ],
)  # fmt: skip
def test_the_check_catches_each_kind_of_break(module: str, source: str, rule: str) -> None:
    modules = first_party_modules()
    modules_set = set(modules) | {module}
    imports = [i for i in all_imports(modules) if i.module != module] + imports_of(
        source, module, False
    )
    assert any(rule in line for line in violations(imports, modules_set))


def test_typing_only_and_function_level_imports_are_told_apart() -> None:
    src = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import numpy\n"
        "def f():\n    import orjson\n"
    )
    imports = imports_of(src, "tfprof.agent.x", False)
    assert not any(i.target == "numpy" for i in imports)
    assert [i.top_level for i in imports if i.target == "orjson"] == [False]
