"""Python stacks on the collector: validated whole, stored as batches, compacted into the
lake's ``stacks`` and ``stack_samples`` tables (lake/stack_rows.py), read by ``sql``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.lake_streams import OFFSET, compact, write_stream
from tfprof.agent.relay.process_link import stacks_proto
from tfprof.collector.errors import InvalidArgument
from tfprof.collector.lake.query import Engine, run_query
from tfprof.collector.service.validate import check_batch
from tfprof.core.code_stacks import StackBatch, StackKind
from tfprof.proto import collector_pb2 as pb

T = 1_700_000_000_000_000_000


def stacks_batch(seq: int, **fields: Any) -> pb.Batch:
    batch = pb.Batch(seq=seq)
    for name, value in fields.items():
        target = getattr(batch.stacks, name)
        if isinstance(value, list):
            target.extend(value)
        else:
            setattr(batch.stacks, name, value)
    return batch


def stream(tmp_path: Path, *extra: pb.Batch) -> None:
    # batch 1: names and two frames; 2: a clock update, nodes, samples; 3: a node under a
    # parent of batch 2, a sample of it, and a later drop count
    names = pb.Batch(seq=1, string_base=1, strings=["train.py", "main", "step"])
    names.stacks.CopyFrom(stacks_batch(1, frame_base=1, frame_file=[1, 1], frame_line=[9, 4],
                          frame_function=[2, 3], frame_first_line=[8, 3]).stacks)  # fmt: skip
    nodes = stacks_batch(
        2, node_base=1, node_parent=[0, 1], node_frame=[1, 2],
        time_ns=[T, T + 10], thread=[77, 77], stack=[1, 2], kind=[1, 2], correlation=[0, 5],
    )  # fmt: skip
    nodes.clock_updated, nodes.clock_offset_ns = True, OFFSET + 300
    more = stacks_batch(3, node_base=3, node_parent=[2], node_frame=[1], time_ns=[T + 20],
                        thread=[78], stack=[3], kind=[1], dropped_samples=4)  # fmt: skip
    write_stream(tmp_path, [names, nodes, more, *extra])


def query(tmp_path: Path, sql: str) -> list[dict[str, Any]]:
    return list(run_query(Engine([str(tmp_path)]), sql).to_pylist())


@pytest.mark.parametrize("compacted", [False, True])
def test_stacks_and_samples_reach_the_lake(tmp_path: Path, compacted: bool) -> None:
    stream(tmp_path)
    if compacted:
        compact(tmp_path)
    stacks = query(tmp_path, "SELECT stack_id, parent_id, depth, frame_id, file, line, "
                             "function, first_line FROM stacks ORDER BY 1")  # fmt: skip
    assert stacks == [
        {"stack_id": 1, "parent_id": 0, "depth": 1, "frame_id": 1, "file": "train.py",
         "line": 9, "function": "main", "first_line": 8},
        {"stack_id": 2, "parent_id": 1, "depth": 2, "frame_id": 2, "file": "train.py",
         "line": 4, "function": "step", "first_line": 3},
        {"stack_id": 3, "parent_id": 2, "depth": 3, "frame_id": 1, "file": "train.py",
         "line": 9, "function": "main", "first_line": 8},
    ]  # fmt: skip
    samples = query(tmp_path, "SELECT time_ns, thread, stack_id, kind, correlation "
                              "FROM stack_samples ORDER BY 1")  # fmt: skip
    shift = OFFSET + 300  # the clock update of batch 2 moves its samples and later ones
    assert samples == [
        {"time_ns": T + shift, "thread": 77, "stack_id": 1, "kind": 1, "correlation": 0},
        {"time_ns": T + 10 + shift, "thread": 77, "stack_id": 2, "kind": 2, "correlation": 5},
        {"time_ns": T + 20 + shift, "thread": 78, "stack_id": 3, "kind": 1, "correlation": 0},
    ]
    (bye,) = query(tmp_path, "SELECT dropped_stack_samples FROM goodbyes")
    assert bye["dropped_stack_samples"] == 4
    (records,) = query(tmp_path, "SELECT records FROM runs")
    assert records["records"] == 0  # stacks are not records


def test_compaction_in_pieces_keeps_what_earlier_batches_defined(tmp_path: Path) -> None:
    # frames in one compaction, the nodes using them in the next
    stream(tmp_path)
    compact(tmp_path)
    late = stacks_batch(4, node_base=4, node_parent=[3], node_frame=[2], time_ns=[T + 30],
                        thread=[77], stack=[4], kind=[2], correlation=[9])  # fmt: skip
    write_stream(tmp_path, [late], finish=False)
    compact(tmp_path)
    (row,) = query(tmp_path, "SELECT depth, function, line FROM stacks WHERE stack_id = 4")
    assert row == {"depth": 4, "function": "step", "line": 4}


def test_a_node_whose_frame_or_parent_never_came_reads_as_unknown(tmp_path: Path) -> None:
    lost = stacks_batch(1, node_base=5, node_parent=[4], node_frame=[9])  # 1-4: lost
    write_stream(tmp_path, [lost])
    (row,) = query(tmp_path, "SELECT stack_id, depth, file, function FROM stacks")
    assert row == {"stack_id": 5, "depth": 0, "file": "", "function": ""}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"frame_base": 1, "frame_file": [1, 2], "frame_line": [3], "frame_function": [1, 1],
          "frame_first_line": [1, 1]}, "stack frame columns have different lengths"),
        ({"frame_base": 0, "frame_file": [1], "frame_line": [3], "frame_function": [1],
          "frame_first_line": [1]}, r"stack frames 0\+1 out of range"),
        ({"node_base": (1 << 22), "node_parent": [0], "node_frame": [1]}, "stack nodes"),
        ({"time_ns": [T], "stack": [1], "kind": [7]}, "unknown stack sample kind"),
        ({"time_ns": [T], "stack": [1]}, "without a time, a stack or a kind"),
        ({"time_ns": [-5], "stack": [1], "kind": [1]}, "negative stack sample time_ns"),
        ({"time_ns": [T, T], "stack": [1, 1], "kind": [1, 1], "thread": [1]},
         "stack sample columns have different lengths"),
        ({"time_ns": [T], "stack": [1], "kind": [1], "thread": [1 << 63]}, "out of range"),
    ],
)  # fmt: skip
def test_bad_stacks_are_refused_whole(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        check_batch(stacks_batch(1, **fields))


def test_good_stacks_pass() -> None:
    stats = check_batch(stacks_batch(1, frame_base=1, frame_file=[1], frame_line=[3],
                                     frame_function=[2], frame_first_line=[1], node_base=1,
                                     node_parent=[0], node_frame=[1], time_ns=[T],
                                     stack=[1], kind=[2], correlation=[4]))  # fmt: skip
    assert stats.records == 0


def test_the_relay_writes_a_hooks_batch_as_the_wire_says() -> None:
    batch = StackBatch(frame_base=3, node_base=4, dropped=2)
    batch.add_frame(1, 10, 2, 9)
    batch.add_node(0, 3)
    batch.add_sample(T, 0, 4)  # thread unknown, a plain sample: those columns stay empty
    out = pb.Stacks()
    stacks_proto(batch, out)
    assert (out.frame_base, out.node_base, out.dropped_samples) == (3, 4, 2)
    assert list(out.frame_line) == [10] and list(out.node_frame) == [3]
    assert list(out.time_ns) == [T] and list(out.kind) == [int(StackKind.SAMPLE)]
    assert not out.thread and not out.correlation
    check_batch(pb.Batch(seq=1, stacks=out))
