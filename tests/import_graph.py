"""First-party imports read from the source (``ast``), and the module graph they make.

``tests/unit/test_layers.py`` checks package boundaries on the imports;
``tests/unit/test_import_graph.py`` checks the module graph for cycles and the layers
inside the collector and the agent. Imports are read wherever they are (module level and
inside functions); those under ``if TYPE_CHECKING:`` never run and are left out.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE_ROOTS = [ROOT / d / "src" for d in ("proto", "readers", "agent", "collector")]


@dataclass(frozen=True)
class Import:
    module: str  # importing module
    target: str  # imported module (absolute)
    top_level: bool  # executed at import time (not inside a function)
    line: int
    # ``from target import names``: the names (None for ``import target``)
    names: tuple[str, ...] | None = None
    # ``target`` is ``base.name`` of a ``from base import name`` (it may be no module)
    member: bool = False


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, is_package: bool) -> list[Import]:
    tree = ast.parse(source)
    found: list[Import] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = top and not isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            if isinstance(child, ast.Import):
                found.extend(Import(module, a.name, top, child.lineno) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    package = module.split(".") if is_package else module.split(".")[:-1]
                    package = package[: len(package) - (child.level - 1)]
                    base = ".".join([*package, base] if base else package)
                names = tuple(a.name for a in child.names)
                found.append(Import(module, base, top, child.lineno, names))
                # `from tfprof.agent.inprocess import hook` imports tfprof.agent.inprocess.hook
                found.extend(
                    Import(module, f"{base}.{n}", top, child.lineno, member=True) for n in names
                )
            elif isinstance(child, ast.If) and _is_type_checking(child):
                continue  # typing-only imports never run
            visit(child, inner)

    visit(tree, True)
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def first_party_modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for root in SOURCE_ROOTS:
        for path in root.rglob("*.py"):
            if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue
            modules[module_name(path, root)] = path
    return modules


def all_imports(modules: dict[str, Path]) -> list[Import]:
    result: list[Import] = []
    for name, path in modules.items():
        result.extend(imports_of(path.read_text(), name, path.name == "__init__.py"))
    return result


# -- the module graph ----------------------------------------------------------------------

Graph = dict[str, dict[str, int]]  # module -> {module it imports: line of the first import}


def imported_modules(imp: Import, modules: Collection[str]) -> list[str]:
    """The first-party modules one import statement runs, as graph edges.

    A package is the node of its ``__init__``. ``from pkg import name`` imports the
    submodule ``pkg.name`` when there is one, and reads ``name`` from ``pkg`` otherwise.
    Importing ``pkg.sub`` from outside ``pkg`` runs ``pkg``'s ``__init__`` first, so it is
    an edge to ``pkg`` as well; from inside ``pkg`` it is not (``pkg`` is already being
    initialised: a package's ``__init__`` re-exporting its own submodules is no cycle).
    """
    if imp.member:
        return []  # counted with its statement (``names``)
    if imp.names is None:
        targets = [imp.target] if imp.target in modules else []
    else:
        subs = [f"{imp.target}.{n}" for n in imp.names if f"{imp.target}.{n}" in modules]
        targets = subs + ([imp.target] if len(subs) < len(imp.names) else [])
        targets = [t for t in targets if t in modules]
    found: list[str] = []
    for target in targets:
        parts = target.split(".")
        for end in range(1, len(parts) + 1):
            node = ".".join(parts[:end])
            ancestor_of_importer = end < len(parts) and (
                imp.module == node or imp.module.startswith(node + ".")
            )
            if node in modules and node != imp.module and not ancestor_of_importer:
                found.append(node)
    return list(dict.fromkeys(found))


def module_graph(imports: Iterable[Import], modules: Collection[str]) -> Graph:
    graph: Graph = {m: {} for m in modules}
    for imp in imports:
        for target in imported_modules(imp, modules):
            graph.setdefault(imp.module, {}).setdefault(target, imp.line)
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) through each strongly connected part of the graph
    that has more than one module, shortest from its first module by name."""
    found: list[list[str]] = []
    for part in _strong_parts(graph):
        if len(part) < 2:
            continue
        start = min(part)
        found.append(_shortest_cycle(graph, start, set(part)))
    return sorted(found)


def _strong_parts(graph: Graph) -> list[list[str]]:
    """Tarjan's strongly connected components, without recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    parts: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, {}))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, {})))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    part.append(member)
                    if member == node:
                        break
                parts.append(part)
    return parts


def _shortest_cycle(graph: Graph, start: str, within: set[str]) -> list[str]:
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for nxt in sorted(graph.get(node, {})):
                if nxt not in within:
                    continue
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if nxt not in came_from:
                    came_from[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"{start} is on no cycle")


def describe_cycle(graph: Graph, cycle: list[str]) -> str:
    """``a (line 12) -> b (line 3) -> a``: each import with the line that makes it."""
    steps = [f"{a} (line {graph[a][b]})" for a, b in itertools.pairwise(cycle)]
    return " -> ".join([*steps, cycle[-1]])
