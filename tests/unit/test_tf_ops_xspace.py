"""Op intervals out of an XSpace (tfprof.agent.inprocess.tf_ops_xspace), on TensorFlow's own
XSpace message type, shaped as TF 2.21's host tracer writes it."""

from __future__ import annotations

from typing import Any

import pytest

from tfprof.agent.inprocess.tf_ops_xspace import op_events, profile_start_ns

pytestmark = pytest.mark.tensorflow
xplane_pb2: Any = pytest.importorskip("tensorflow.tsl.profiler.protobuf.xplane_pb2")

START = 1_795_416_024_336_286_528  # profile_start_time, epoch ns


def _space(line_timestamp_ns: int = 17_161, with_start: bool = True) -> Any:
    space = xplane_pb2.XSpace()
    host = space.planes.add(name="/host:CPU")
    for i, (name, display) in enumerate(
        [
            ("blk/MatMul:_MklMatMul", "_MklMatMul"),
            ("ExecutorState::Process", ""),
            ("EagerExecute", ""),
            ("Iterator::Root::Prefetch", "Prefetch"),  # tf.data, not an op
            ("sequential/dense/BiasAdd:BiasAdd", "BiasAdd"),
        ],
        start=1,
    ):
        host.event_metadata[i].id = i
        host.event_metadata[i].name = name
        host.event_metadata[i].display_name = display
    for i, name in enumerate(["eager_op", "is_func", "MatMul", "__inference_f_13"], start=1):
        host.stat_metadata[i].id = i
        host.stat_metadata[i].name = name
    compute = host.lines.add(id=-3391955892055209835, timestamp_ns=line_timestamp_ns)
    compute.events.add(metadata_id=2, offset_ps=1_000_000, duration_ps=9_000_000)
    compute.events.add(metadata_id=1, offset_ps=2_000_000, duration_ps=5_500_000)
    compute.events.add(metadata_id=4, offset_ps=2_500_000, duration_ps=1_000_000)
    compute.events.add(metadata_id=5, offset_ps=8_000_000, duration_ps=999)
    python = host.lines.add(id=8739047528787779511, timestamp_ns=line_timestamp_ns)
    eager = python.events.add(metadata_id=3, offset_ps=10_000_000, duration_ps=4_000_000)
    eager.stats.add(metadata_id=1, ref_value=3)  # eager_op: "MatMul"
    eager.stats.add(metadata_id=2, int64_value=0)
    call = python.events.add(metadata_id=3, offset_ps=20_000_000, duration_ps=4_000_000)
    call.stats.add(metadata_id=1, ref_value=4)
    call.stats.add(metadata_id=2, int64_value=1)  # a tf.function call: its ops are there
    if with_start:
        env = space.planes.add(name="Task Environment")
        env.stat_metadata[1].id = 1
        env.stat_metadata[1].name = "profile_start_time"
        env.stats.add(metadata_id=1, uint64_value=START)
    return space


def test_graph_and_eager_ops_with_absolute_times() -> None:
    space = _space()
    assert profile_start_ns(space) == START
    events = op_events(space, fallback_start_ns=0)
    base = START + 17_161
    assert events.names == ["blk/MatMul:_MklMatMul", "sequential/dense/BiasAdd:BiasAdd", "MatMul"]
    assert events.lines == [-3391955892055209835, -3391955892055209835, 8739047528787779511]
    assert events.starts_ns == [base + 2_000, base + 8_000, base + 10_000]
    assert events.durations_ns == [5_500, 0, 4_000]


def test_without_a_recorded_start_the_fallback_is_used() -> None:
    events = op_events(_space(with_start=False), fallback_start_ns=1_000_000_000)
    assert events.starts_ns[0] == 1_000_000_000 + 17_161 + 2_000


def test_absolute_line_timestamps_are_kept() -> None:
    absolute = START + 5_000
    events = op_events(_space(line_timestamp_ns=absolute), fallback_start_ns=0)
    assert events.starts_ns[0] == absolute + 2_000
