"""Merge + Chrome JSON export against TensorFlow's own tf.timeline, same events.

Prints figures, asserts nothing. Ours: ``build_timeline`` over one job (one process, two
GPUs, four streams each, kernels with a few hundred names, copies and memsets) and
``write_timeline`` to a plain ``.json``. TensorFlow's: a ``StepStats`` holding the same
events, one ``dev_stats`` per pseudo-device (``.../device:GPU:N/stream:M`` and, for
copies as TF's GPU tracer did, ``.../device:GPU:N/memcpy``), through
``timeline.Timeline(step_stats).generate_chrome_trace_format(show_dataflow=False)`` and
written to a file. Both files go to ``--dir``: on a slow disk, writing 350 MB of JSON
takes longer than making it, so the ratio there says more about the disk than about the
exporters; ``--dir /dev/shm`` (memory) compares the exporters alone. Wall and CPU time
are printed for both sides (the machine may be shared: CPU time is what each side did).

    .venv/bin/python bench/export_vs_tf_timeline.py --records 100000
    .venv/bin/python bench/export_vs_tf_timeline.py --records 1000000 --dir /dev/shm
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time

import numpy as np

from tfprof.collector.export import write_timeline
from tfprof.collector.jobdata import RECORD_COLUMNS, DeviceMeta, JobData, StreamData
from tfprof.collector.merged.whole import build_timeline
from tfprof.core.records import RecordKind

STREAMS = (7, 13, 14, 15)
GPUS = 2
KERNEL_NAMES = 300


def make_job(records: int, seed: int = 0) -> JobData:
    """Realistic shape: back-to-back work per stream, ~80% kernels, 18% copies, 2% memsets."""
    rng = np.random.default_rng(seed)
    n = records
    cols = {c: np.zeros(n, dtype=np.int64) for c in RECORD_COLUMNS}
    kind = rng.choice(
        [RecordKind.KERNEL, RecordKind.MEMCPY, RecordKind.MEMSET], size=n, p=[0.8, 0.18, 0.02]
    ).astype(np.int64)
    cols["kind"] = kind
    cols["device"] = rng.integers(0, GPUS, n)
    cols["stream"] = np.asarray(STREAMS, dtype=np.int64)[rng.integers(0, len(STREAMS), n)]
    duration = rng.lognormal(mean=9.0, sigma=1.2, size=n).astype(np.int64) + 1000  # ~10 µs
    gap = rng.integers(500, 5000, n)
    # Lay each (device, stream) out back to back so slices on a stream never overlap.
    start = np.empty(n, dtype=np.int64)
    t0 = 1_700_000_000_000_000_000
    lane_key = cols["device"] * 100 + cols["stream"]
    for key in np.unique(lane_key).tolist():
        rows = np.flatnonzero(lane_key == key)
        step = duration[rows] + gap[rows]
        start[rows] = t0 + np.concatenate(([0], np.cumsum(step)[:-1]))
    cols["start_ns"] = start
    cols["duration_ns"] = duration
    cols["correlation"] = np.arange(1, n + 1)
    cols["context"] = cols["device"] + 1
    is_kernel = kind == RecordKind.KERNEL
    cols["name"] = np.where(is_kernel, rng.integers(1, KERNEL_NAMES + 1, n), 0)
    grid_choices = np.array([[1, 1, 1], [128, 1, 1], [1024, 4, 1], [80, 8, 2]])
    block_choices = np.array([[128, 1, 1], [256, 1, 1], [32, 8, 1], [1024, 1, 1]])
    g = grid_choices[rng.integers(0, len(grid_choices), n)]
    b = block_choices[rng.integers(0, len(block_choices), n)]
    for i, axis in enumerate("xyz"):
        cols[f"grid_{axis}"] = np.where(is_kernel, g[:, i], 0)
        cols[f"block_{axis}"] = np.where(is_kernel, b[:, i], 0)
    cols["registers"] = np.where(is_kernel, rng.integers(16, 128, n), 0)
    cols["static_smem"] = np.where(is_kernel, rng.integers(0, 48, n) * 1024, 0)
    cols["dynamic_smem"] = np.where(is_kernel, rng.integers(0, 4, n) * 4096, 0)
    is_copy = kind == RecordKind.MEMCPY
    is_set = kind == RecordKind.MEMSET
    cols["bytes"] = np.where(is_copy | is_set, rng.integers(4, 64 << 20, n), 0)
    cols["copy_kind"] = np.where(is_copy, rng.choice([1, 2, 8], n), 0)
    cols["src_kind"] = np.where(is_copy, 2, np.where(is_set, 3, 0))
    cols["dst_kind"] = np.where(is_copy, 3, 0)
    strings = ["", *(f"void kernel_{i}<float, {i % 7}>(float const*, float*, int)" for i in
                     range(KERNEL_NAMES))]  # fmt: skip
    devices = {
        d: DeviceMeta(d, f"GPU-{d:08d}-bench", "NVIDIA H100 80GB HBM3", sm_count=132)
        for d in range(GPUS)
    }
    stream = StreamData(
        job="bench", run_id="r1", host="node0", pid=4242, task="0", source="bench",
        devices=devices, strings=strings, records=cols, finished=True,
    )  # fmt: skip
    return JobData("bench", "r1", [stream])


COPY_KIND = {1: "HtoD", 2: "DtoH", 8: "DtoD"}


def make_step_stats(job: JobData):  # type: ignore[no-untyped-def]
    from tensorflow.core.framework import step_stats_pb2

    stream = job.streams[0]
    rec = stream.records
    step_stats = step_stats_pb2.StepStats()
    prefix = "/job:localhost/replica:0/task:0/device:GPU:"
    kind = rec["kind"]
    start_us = (rec["start_ns"] // 1000).tolist()
    dur_us = np.maximum(rec["duration_ns"] // 1000, 1).tolist()
    labels = []
    for k, name, ck, nb in zip(
        kind.tolist(), rec["name"].tolist(), rec["copy_kind"].tolist(), rec["bytes"].tolist(),
        strict=True,
    ):  # fmt: skip
        if k == RecordKind.KERNEL:
            labels.append((stream.strings[name], f"{stream.strings[name]}:kernel"))
        elif k == RecordKind.MEMCPY:
            label = f"MEMCPY{COPY_KIND[ck]}"
            labels.append((f"{label} {nb} bytes", f"{label}:MEMCPY{COPY_KIND[ck]}"))
        else:
            labels.append((f"MEMSET {nb} bytes", "MEMSET:MEMSET"))
    device = rec["device"].tolist()
    streams = rec["stream"].tolist()
    devs = {}

    def dev_stats(name: str):  # type: ignore[no-untyped-def]
        if name not in devs:
            devs[name] = step_stats.dev_stats.add(device=name)
        return devs[name]

    for i in np.argsort(rec["start_ns"], kind="stable").tolist():
        label, node = labels[i]
        targets = [f"{prefix}{device[i]}/stream:{streams[i]}"]
        if kind[i] == RecordKind.MEMCPY:
            targets.append(f"{prefix}{device[i]}/memcpy")
        for target in targets:
            dev_stats(target).node_stats.add(
                node_name=node,
                all_start_micros=start_us[i],
                op_start_rel_micros=0,
                op_end_rel_micros=dur_us[i],
                all_end_rel_micros=dur_us[i],
                timeline_label=label,
            )
    return step_stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records in the job")
    parser.add_argument("--skip-tf", action="store_true", help="time only ours")
    parser.add_argument(
        "--dir", default=None, help="where both sides write (default: the temp dir)"
    )
    args = parser.parse_args(argv)

    job = make_job(args.records)
    copies = int(np.count_nonzero(job.streams[0].records["kind"] == RecordKind.MEMCPY))
    events = args.records + copies
    print(
        f"records: {args.records:,} ({copies:,} copies, also on memcpy tracks: {events:,} slices)"
    )

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        print(f"files in {tmp}")
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        timeline = build_timeline([job])
        t1 = time.perf_counter()
        path = write_timeline(timeline, os.path.join(tmp, "ours.json"))
        t2, c2 = time.perf_counter(), time.process_time()
        ours, ours_cpu = t2 - t0, c2 - c0
        size = path.stat().st_size
        path.unlink()
        print(f"ours: merge {t1 - t0:.2f} s + write json {t2 - t1:.2f} s = {ours:.2f} s, "
              f"cpu {ours_cpu:.2f} s ({size / 1e6:.0f} MB, "
              f"{timeline.num_slices:,} slices)")  # fmt: skip
        t3 = time.perf_counter()
        gz = write_timeline(timeline, os.path.join(tmp, "ours.json.gz"))
        t4 = time.perf_counter()
        print(f"ours: write json.gz {t4 - t3:.2f} s ({gz.stat().st_size / 1e6:.0f} MB)")
        del timeline
        gc.collect()

        if args.skip_tf:
            return 0
        try:
            from tensorflow.python.client import timeline as tf_timeline
        except ImportError as exc:
            print(f"tensorflow: not importable ({exc}); skipped")
            return 0
        t5 = time.perf_counter()
        step_stats = make_step_stats(job)
        t6 = time.perf_counter()
        n_tf = sum(len(d.node_stats) for d in step_stats.dev_stats)
        print(f"tf: built StepStats with {n_tf:,} NodeExecStats in {t6 - t5:.2f} s (untimed)")
        gc.collect()
        t7, c7 = time.perf_counter(), time.process_time()
        trace = tf_timeline.Timeline(step_stats).generate_chrome_trace_format(show_dataflow=False)
        t8 = time.perf_counter()
        with open(os.path.join(tmp, "tf.json"), "w") as f:
            f.write(trace)
        t9, c9 = time.perf_counter(), time.process_time()
        theirs, theirs_cpu = t9 - t7, c9 - c7
        print(f"tf.timeline: generate {t8 - t7:.2f} s + write {t9 - t8:.2f} s = {theirs:.2f} s, "
              f"cpu {theirs_cpu:.2f} s ({len(trace) / 1e6:.0f} MB)")  # fmt: skip
        print(f"ours faster by {theirs / ours:.1f}x wall, {theirs_cpu / ours_cpu:.1f}x cpu "
              f"(merge+write vs generate+write); generate alone vs ours: "
              f"{(t8 - t7) / ours:.1f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
