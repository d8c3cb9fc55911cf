"""The module import graph has no cycles, and the collector's and the agent's folders
stack in layers: no module imports from a layer above its own.

The graph (``tests/import_graph.py``) has a node per first-party module of proto/,
readers/, agent/ and collector/ (a package is the node of its ``__init__``) and an edge
per import that runs, at module level or inside a function (typing-only imports under
``if TYPE_CHECKING:`` never run and are left out). ``from pkg import name`` is an import
of the submodule ``pkg.name`` when there is one (``from tfprof.collector.read import
engine`` imports ``tfprof.collector.read.engine``), and of ``pkg`` otherwise. Importing
``pkg.sub`` from outside ``pkg`` runs ``pkg/__init__.py`` first, so it is an edge to
``pkg`` too; from inside ``pkg`` it is not: ``pkg`` is then already being initialised,
and a package's ``__init__`` importing its own submodules (re-exports) is no cycle. A
submodule that imports a name from its own package's ``__init__`` while that
``__init__`` imports it is one.

Layers: each distribution's units (a folder under its package, or a module at its top)
are listed from the bottom of the data path up (``COLLECTOR_LAYERS``, ``AGENT_LAYERS``);
a module may import its own layer and those below, never one above. Every unit is in
exactly one layer, and docs/concepts/layout.md lists every package folder, the
collector's and the agent's in layer order.
"""

from __future__ import annotations

import re

import pytest

from tests.import_graph import (
    ROOT,
    SOURCE_ROOTS,
    Graph,
    all_imports,
    cycles,
    describe_cycle,
    first_party_modules,
    imports_of,
    module_graph,
)

COLLECTOR = "tfprof.collector"
# Bottom to top, along the data path: what a layer's modules may import is in its own
# layer or below. docs/concepts/layout.md says what each holds.
COLLECTOR_LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "options", "config", "jobdata", "timespec", "terminal"),
    ("store",),  # the data dir's raw streams, as the service wrote them
    ("lake",),  # Parquet segments compacted from the streams; SQL over them
    ("timeline",),  # prepared streams, names, attribution; the timeline's model
    ("read",),  # the read engine views and rules read the lake through
    ("merged",),  # the merged timeline, read through the engine a time chunk at a time
    ("analysis",),  # summary views
    ("advice", "compare", "export"),  # rules, diffs, trace formats
    ("service",),  # the gRPC server half
    ("top",),  # the live terminal view
    ("commands",),  # one module per CLI command
    ("cli", "embedded"),  # the entry points: the command line, the agent's facade
)
AGENT = "tfprof.agent"
AGENT_LAYERS: tuple[tuple[str, ...], ...] = (
    ("inprocess",),  # runs inside the user's process: standard library only
    ("relay",),  # carries records from the job's processes to the collector
    ("launch",),  # the launcher and the node daemon, which assemble the relay
    ("bootstrap", "cli"),  # the entry points: the job's interpreter, the command line
)
LAYERS = {COLLECTOR: COLLECTOR_LAYERS, AGENT: AGENT_LAYERS}
# (importing module, imported module): why it may import upward. Empty: none may.
EXCEPTIONS: dict[tuple[str, str], str] = {}
LAYOUT_PAGE = ROOT / "docs" / "concepts" / "layout.md"


def unit_of(module: str, package: str) -> str | None:
    """The folder or top-level module of ``package`` that ``module`` is in (None: outside,
    or the package's own ``__init__``)."""
    if not module.startswith(package + "."):
        return None
    return module[len(package) + 1 :].split(".")[0]


def layer_breaks(graph: Graph, package: str, layers: tuple[tuple[str, ...], ...]) -> list[str]:
    level = {unit: i for i, layer in enumerate(layers) for unit in layer}
    bad: list[str] = []
    for module, targets in sorted(graph.items()):
        here = unit_of(module, package)
        if here is None:
            continue
        for target, line in sorted(targets.items()):
            there = unit_of(target, package)
            if there is None or (module, target) in EXCEPTIONS:
                continue
            if here not in level or there not in level:
                bad.append(f"{module}:{line} imports {target}: {here} or {there} is in no layer")
            elif level[there] > level[here]:
                bad.append(f"{module}:{line} imports {target}: {there} is above {here}")
    return bad


def units(package: str) -> set[str]:
    """The folders (with modules) and top-level modules of ``package``."""
    folder = next(r.joinpath(*package.split(".")) for r in SOURCE_ROOTS
                  if r.joinpath(*package.split(".")).is_dir())  # fmt: skip
    found = {p.stem for p in folder.glob("*.py") if p.name != "__init__.py"}
    return found | {d.name for d in folder.iterdir() if d.is_dir() and any(d.rglob("*.py"))}


def graph_of(sources: dict[str, str]) -> Graph:
    """The graph of hand-written modules (a name ending ``.__init__`` is a package)."""
    imports = []
    names = {m.removesuffix(".__init__") for m in sources}
    for module, source in sources.items():
        name = module.removesuffix(".__init__")
        imports += imports_of(source, name, module.endswith(".__init__"))
    return module_graph(imports, names)


def test_the_module_graph_has_no_cycles() -> None:
    modules = first_party_modules()
    graph = module_graph(all_imports(modules), modules)
    assert sum(len(t) for t in graph.values()) > 500  # the scan found the imports
    found = [describe_cycle(graph, c) for c in cycles(graph)]
    assert not found, "import cycles:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("sources", "cycle"),
    [
        # a module-level cycle, and one closed by an import inside a function
        ({"t.a": "from t.b import f", "t.b": "def g():\n    from t.a import h"},
         ["t.a", "t.b", "t.a"]),
        # a package re-exporting its submodule, which imports a sibling: no cycle
        ({"t.p.__init__": "from t.p import sub", "t.p.sub": "from t.p.other import x",
          "t.p.other": "x = 1"}, None),
        # ... but a submodule reading a name from its package's __init__ is one
        ({"t.p.__init__": "from t.p import sub\nX = 1", "t.p.sub": "from t.p import X"},
         ["t.p", "t.p.sub", "t.p"]),
        # importing a submodule from outside runs the package's __init__ first
        ({"t.p.__init__": "from t.q import y", "t.p.sub": "x = 1",
          "t.q": "from t.p.sub import x\ny = 2"}, ["t.p", "t.q", "t.p"]),
        # typing-only imports never run
        ({"t.a": "from t.b import f",
          "t.b": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from t.a import h"},
         None),
    ],
)  # fmt: skip
def test_the_check_finds_cycles_and_only_cycles(
    sources: dict[str, str], cycle: list[str] | None
) -> None:
    assert cycles(graph_of(sources)) == ([cycle] if cycle else [])


@pytest.mark.parametrize("package", LAYERS)
def test_no_module_imports_from_a_layer_above(package: str) -> None:
    modules = first_party_modules()
    graph = module_graph(all_imports(modules), modules)
    bad = layer_breaks(graph, package, LAYERS[package])
    assert not bad, "imports from a higher layer:\n" + "\n".join(bad)
    used = {(m, t) for m, targets in graph.items() for t in targets}
    assert set(EXCEPTIONS) <= used, "an exception no import needs any more"


@pytest.mark.parametrize("package", LAYERS)
def test_every_unit_is_in_exactly_one_layer(package: str) -> None:
    listed = [unit for layer in LAYERS[package] for unit in layer]
    assert sorted(listed) == sorted(set(listed)), "a unit in two layers"
    assert set(listed) == units(package)


def test_the_check_catches_an_import_from_above() -> None:
    graph = graph_of({
        "tfprof.collector.store.files": "def f():\n    from tfprof.collector.read import engine",
        "tfprof.collector.read.engine": "from tfprof.collector.store.files import f",
    })  # fmt: skip
    assert layer_breaks(graph, COLLECTOR, COLLECTOR_LAYERS) == [
        "tfprof.collector.store.files:2 imports tfprof.collector.read.engine: read is above store"
    ]


def layout_tree() -> list[str]:
    """The folders docs/concepts/layout.md's tree lists, as paths, in its order: a line
    ``<indent>name/  what it holds`` (two spaces a level) inside the first ``text`` block."""
    block = LAYOUT_PAGE.read_text().split("```text\n", 1)[1].split("```", 1)[0]
    paths: list[str] = []
    stack: list[str] = []
    for line in block.splitlines():
        match = re.match(r"( *)(\S+)/(\s|$)", line)
        if match is None:
            continue
        depth = len(match.group(1)) // 2
        stack = [*stack[:depth], match.group(2)]
        paths.append("/".join(stack))
    return paths


def test_the_layout_page_lists_every_package_folder_in_layer_order() -> None:
    listed = layout_tree()
    missing = [p for p in listed if not (ROOT / p).is_dir()]
    assert not missing, f"docs/concepts/layout.md lists folders that do not exist: {missing}"
    folders = {
        d.relative_to(ROOT).as_posix()
        for root in SOURCE_ROOTS
        for d in [root, *root.rglob("*")]
        if d.is_dir() and any(d.glob("*.py"))
    }
    unlisted = sorted(folders - set(listed))
    assert not unlisted, f"docs/concepts/layout.md does not list: {unlisted}"
    for package, layers in LAYERS.items():
        base = next(p for p in listed if p.endswith("/".join(package.split("."))))
        shown = [p.removeprefix(base + "/") for p in listed if p.startswith(base + "/")]
        shown = [p for p in shown if "/" not in p]
        in_layers = [unit for layer in layers for unit in layer if unit in shown]
        assert shown == in_layers, f"{package}'s folders are not in layer order on the page"
