"""Interning frames and stacks (stacks/code_table.py) and the stacks frame on the socket."""

from __future__ import annotations

import array
import inspect
import sys
from pathlib import Path
from types import FrameType

import pytest

from tfprof.agent.inprocess import frames
from tfprof.agent.inprocess.stacks import code_table
from tfprof.agent.inprocess.stacks.code_table import CodeTable
from tfprof.core.code_stacks import REDACTED_FILE, TRUNCATED_FUNCTION, StackBatch, StackKind


def here() -> FrameType:
    frame = sys._getframe(1)
    return frame


def resolve(table: CodeTable, node: int) -> list[tuple[str, int, str]]:
    out = []
    while node:
        parent, frame = table.node(node)
        file, line, function, _ = table.frame(frame)
        out.append((file, line, function))
        node = parent
    return out[::-1]


def outer(table: CodeTable) -> int:
    return inner(table)


def inner(table: CodeTable) -> int:
    return table.stack_of(here())


def test_a_stack_is_interned_once_and_resolves_to_its_lines() -> None:
    table = CodeTable()
    first, again = (outer(table) for _ in range(2))  # one call site, twice
    assert first == again and first > 0
    nodes = table.num_nodes
    # from another line of this test: that line, outer and inner are new; pytest's
    # frames above this test are shared
    assert outer(table) != first and table.num_nodes == nodes + 3
    stack = resolve(table, first)
    _, start = inspect.getsourcelines(inner)
    assert stack[-1] == (__file__, start + 1, "inner")
    assert stack[-2][2] == "outer"
    assert "<genexpr>" in stack[-3][2]


def test_redacted_paths_never_leave_and_functions_stay() -> None:
    # this checkout's tests folder, upper case (patterns match any case)
    here = "/".join(Path(__file__).parts[-3:-1]).upper()
    table = CodeTable(redact=(here, "nothing-matches"))
    node = outer(table)
    stack = resolve(table, node)
    mine = [f for f in stack if f[2] in ("inner", "outer")]
    assert mine and all(file == REDACTED_FILE for file, _, _ in mine)
    pending = table.take_pending()
    assert not any(here.lower() in path.lower() for path, *_ in pending.frames)
    described = table.described_frame((f"/srv/{here.lower()}/x.py", 3, "f", 1))
    assert table.frame(described)[0] == REDACTED_FILE


def test_described_frames_share_the_ids_of_the_table() -> None:
    table = CodeTable()
    live = outer(table)
    a = table.described_frame(("model.py", 10, "forward", 10))
    assert a == table.described_frame(("model.py", 10, "forward", 10))
    root = table.described_node(0, a)
    child = table.described_node(root, table.described_frame(("", 0, "<built-in>", 0)))
    assert len({live, root, child}) == 3
    assert resolve(table, child) == [("model.py", 10, "forward"), ("", 0, "<built-in>")]


def test_pending_frames_go_once_and_again_after_a_drop() -> None:
    table = CodeTable()
    outer(table)
    taken = table.take_pending()
    assert taken.frame_base == 1 and taken.node_base == 1
    assert len(taken.frames) == table.num_frames and len(taken.nodes) == table.num_nodes
    assert table.take_pending().frames == []  # nothing new
    table.restore_pending(taken.frame_base, taken.node_base)  # that frame was dropped
    again = table.take_pending()
    assert again.frames == taken.frames and again.nodes == taken.nodes
    sent = table.sent()
    assert sent.frames == taken.frames and sent.nodes == taken.nodes


def test_a_full_table_drops_samples_instead_of_growing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(code_table, "MAX_NODES", 3)
    table = CodeTable()
    assert outer(table) == 0  # the stack needs more than three nodes
    assert table.num_nodes <= 3


def recurse(table: CodeTable, n: int) -> int:
    if n:
        return recurse(table, n - 1)
    return table.stack_of(here())


def test_deep_stacks_keep_their_innermost_frames_under_a_truncated_root() -> None:
    table = CodeTable()
    node = recurse(table, code_table.MAX_DEPTH + 50)
    stack = resolve(table, node)
    assert len(stack) == code_table.MAX_DEPTH + 1
    assert stack[0] == ("", 0, TRUNCATED_FUNCTION)
    assert {f for _, _, f in stack[1:]} == {"recurse"}


def test_a_stacks_frame_round_trips() -> None:
    batch = StackBatch(frame_base=7, node_base=11, dropped=5)
    batch.add_frame(1, 42, 2, 40)
    batch.add_node(0, 7)
    batch.add_node(11, 7)
    batch.add_sample(1_700_000_000_000_000_000, 12345, 12, 99, StackKind.LAUNCH)
    batch.add_sample(1_700_000_000_000_000_001, 12346, 11)
    frame = frames.encode_stacks_frame(batch, 3, ["a.py", "f"])
    kind, length = frames.HEADER.unpack_from(frame)
    assert kind == frames.FrameType.STACKS and length == len(frame) - frames.HEADER.size
    got = frames.decode_stacks(frame[frames.HEADER.size :])
    assert got.string_base == 3 and got.strings == ["a.py", "f"]
    b = got.batch
    assert (b.frame_base, b.node_base, b.dropped) == (7, 11, 5)
    assert b.frames == batch.frames and b.nodes == batch.nodes and b.samples == batch.samples
    assert b.samples["kind"] == array.array("q", [2, 1])
    with pytest.raises(ValueError, match="stacks frame is"):
        frames.decode_stacks(frame[frames.HEADER.size : -8])
