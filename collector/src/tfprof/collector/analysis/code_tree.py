"""tfprof's code view over attributed Python stacks: the tree of call paths and the flat
per-line table (docs/guides/code-view.md).

Each attributed leaf (a stack and what it was given: GPU time, kernels, launches, host
time) becomes a path of frame names from the outermost call in. ``--trim-name-regex``
folds frames out of every path first (a framework's own frames: what they were given goes
to the innermost frame left, and paths that become equal merge). Then, as tfprof's code
view displays its tree:

- ``--start-name-regex``: on each branch, the first node whose name matches is a root of
  what is shown (nothing above it is);
- a node deeper than ``--max-depth`` (1: a root) is cut with everything below it;
- a node is shown when its total GPU time reaches ``--min-micros``, its name matches
  ``--show-name-regex`` (when given) and not ``--hide-name-regex``; a node not shown
  still passes its shown descendants up to its nearest shown ancestor;
- siblings are ordered by total GPU time, then total host time (``--order-by`` names
  another field), and a node's totals always count everything below it, shown or not.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

# What a leaf was given, in this order (NEAR_NS: the part of GPU_NS, or of BYTES for
# memory, attributed through a nearest sample; RECORDS: GPU or memory records).
GPU_NS, KERNELS, LAUNCHES, HOST_NS, NEAR_NS, BYTES, RECORDS = range(7)
WIDTH = 7

NO_STACK = "(no Python stack)"
ALL_TRIMMED = "(every frame trimmed)"

_LIBRARY = re.compile(r"^.*?/(?:site-packages|dist-packages)/|^.*?/lib/python3\.\d+/")


def frame_name(file: str, line: int, function: str) -> str:
    """``file:line:function``, a library's file from its package (as Kineto names it);
    a frame with no file is its function (``<built-in ...>``), with no line its file."""
    if not file:
        return function
    file = _LIBRARY.sub("", file)
    return f"{file}:{line}:{function}" if line else f"{file}:{function}"


@dataclass
class Leaf:
    path: tuple[str, ...]  # frame names, outermost first; () for no stack
    values: list[float]


@dataclass
class Node:
    name: str
    depth: int
    own: list[float] = field(default_factory=lambda: [0.0] * WIDTH)
    total: list[float] = field(default_factory=lambda: [0.0] * WIDTH)
    children: dict[str, Node] = field(default_factory=dict)


@dataclass(frozen=True)
class Display:
    start: re.Pattern[str] | None = None
    show: re.Pattern[str] | None = None
    hide: re.Pattern[str] | None = None
    max_depth: int | None = None
    min_gpu_ns: float = 0.0


def fold(path: Sequence[str], trim: re.Pattern[str] | None) -> tuple[str, ...]:
    """``path`` without the frames ``trim`` matches (an empty path: all matched)."""
    if trim is None or not path:
        return tuple(path)
    kept = tuple(name for name in path if not trim.search(name))
    return kept or (ALL_TRIMMED,)


def build(leaves: Iterable[Leaf]) -> Node:
    """The call-path tree: each leaf's values on its own node and every ancestor's total."""
    root = Node("", 0)
    for leaf in leaves:
        path = leaf.path or (NO_STACK,)
        node = root
        _add(root.total, leaf.values)
        for depth, name in enumerate(path, 1):
            child = node.children.get(name)
            if child is None:
                child = node.children[name] = Node(name, depth)
            _add(child.total, leaf.values)
            node = child
        _add(node.own, leaf.values)
    return root


def _add(into: list[float], values: Sequence[float]) -> None:
    for i, v in enumerate(values):
        into[i] += v


def starts(root: Node, start: re.Pattern[str] | None) -> list[Node]:
    """The roots of what is shown: the first match on each branch, depth first."""
    if start is None:
        return list(root.children.values())
    found: list[Node] = []
    todo = list(reversed(root.children.values()))
    while todo:
        node = todo.pop()
        if start.search(node.name):
            found.append(node)
        else:
            todo.extend(reversed(node.children.values()))
    return found


SortKey = Callable[[Node], tuple[float | str, ...]]


def by_total(node: Node) -> tuple[float | str, ...]:
    # the name last: equal totals in one order whatever order DuckDB returned the rows in
    return (-node.total[GPU_NS], -node.total[HOST_NS], -node.total[KERNELS], node.name)


@dataclass
class _Shown:
    node: Node
    depth: int
    below: list[_Shown]


def shown(
    roots: Sequence[Node], display: Display, key: SortKey = by_total
) -> list[tuple[Node, int]]:
    """The nodes shown, depth first, each with its depth below the shown roots (1: a root)."""

    def visit(node: Node, depth: int) -> list[_Shown]:
        # node's shown subtree if node is shown, else its shown descendants (hoisted)
        if display.max_depth is not None and depth > display.max_depth:
            return []
        below = [s for child in node.children.values() for s in visit(child, depth + 1)]
        return [_Shown(node, depth, below)] if _visible(node, display) else below

    out: list[tuple[Node, int]] = []

    def emit(items: list[_Shown]) -> None:
        for item in sorted(items, key=lambda s: key(s.node)):
            out.append((item.node, item.depth))
            emit(item.below)

    emit([s for root in roots for s in visit(root, 1)])
    return out


def _visible(node: Node, display: Display) -> bool:
    if node.total[GPU_NS] < display.min_gpu_ns:
        return False
    if display.show is not None and not display.show.search(node.name):
        return False
    return display.hide is None or not display.hide.search(node.name)


def lines(leaves: Iterable[Leaf], start: re.Pattern[str] | None, max_depth: int | None
          ) -> dict[str, tuple[list[float], list[float]]]:  # fmt: skip
    """Per frame name: (own, total); a stack counts once in the total of each name on it
    (recursion is not counted twice). ``start`` keeps paths from their first match in,
    ``max_depth`` their first frames."""
    out: dict[str, tuple[list[float], list[float]]] = {}
    for leaf in leaves:
        path = leaf.path or (NO_STACK,)
        if start is not None:
            at = next((i for i, name in enumerate(path) if start.search(name)), None)
            if at is None:
                continue
            path = path[at:]
        whole = len(path)
        if max_depth is not None:
            path = path[:max_depth]
        for name in set(path):
            _add(out.setdefault(name, ([0.0] * WIDTH, [0.0] * WIDTH))[1], leaf.values)
        if max_depth is None or whole <= max_depth:  # its own frame is not cut off
            _add(out[path[-1]][0], leaf.values)
    return out
