"""StepStats export carries op names: a slice attributed to an op is ``<op>:<name>``
(``timeline.py`` shows the kernel, with ``args.name`` the op), the exact slice name stays
in ``timeline_label`` and comes back on import."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.traces import shared_traces
from tfprof.collector.export import write_timeline
from tfprof.collector.export.stepstats import escape
from tfprof.collector.merged.whole import build_timeline
from tfprof.collector.store.importer import jobs_from_files


def test_attributed_slices_carry_their_op_in_node_name(tmp_path: Path) -> None:
    config_pb2 = pytest.importorskip("tensorboard.compat.proto.config_pb2")
    from google.protobuf import text_format

    path = shared_traces() / "tf-timeline-ikhlestov" / "GPU_timeline_02_step_1.json"
    timeline = build_timeline(jobs_from_files([path], as_steps=False))
    expected: dict[str, list[str]] = {}
    for track in timeline.slices:
        if track.op_id is None:
            continue
        for name_id, op_id in zip(track.name_id.tolist(), track.op_id.tolist(), strict=True):
            name = timeline.names[name_id]
            op = escape(timeline.names[op_id]) if op_id >= 0 else escape(name)
            expected.setdefault(track.name, []).append(f"{op}:{escape(name)}")
    out = write_timeline(timeline, tmp_path / "run.pbtxt")
    run_metadata = text_format.Parse(out.read_text(), config_pb2.RunMetadata())
    got = {
        d.device: [n.node_name for n in d.node_stats]
        for d in run_metadata.step_stats.dev_stats
        if d.device in expected
    }
    assert got == expected
    names = [n for nodes in got.values() for n in nodes]
    # TF's GPU tracer named the kernel slices after their node; the op adds its type.
    node = "layer_1/fully_connected/MatMul"
    assert f"{node}\u2236MatMul:{node}" in names

    # Import reads the exact names back from timeline_label: the op does not leak in.
    again = build_timeline(jobs_from_files([out], as_steps=False))
    kernels = {again.names[i] for t in again.slices for i in t.name_id.tolist()}
    assert node in kernels and not any("\u2236" in k for k in kernels)
