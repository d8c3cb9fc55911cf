"""A data dir holding N GPU records of ONE traced process, for ``read_scale.py``.

The process looks like one rank of a training job traced for a while (10M records: ten
minutes at 16,667 records/s): two GPUs, eight CUDA streams (compute, a second compute
stream, copies each way, collectives), about 90% kernels drawn from a few thousand
names (Zipf: a few dominate), copies with sizes from 1 KiB to 64 MiB, memsets, and a few
synchronisations (stream and context-wide). Each stream runs its work back to back with
gaps (one every so often much longer: a step boundary, the input pipeline), so streams
overlap each other and the GPUs idle now and then.

Records are appended the way a collector receives them: batches of 65,536 in
completion order (end time, as CUPTI's buffers fill), through the store's
``StreamWriter``, and compacted into the lake ``--segments`` times over the run (as the
collector's periodic compaction does), so a stream's rows span several segments and its
starts are not sorted. Deterministic (one seed).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

RATE_PER_S = 16_667  # records per second of trace: 10M records in ten minutes
EPOCH_NS = 1_780_000_000_000_000_000  # a realistic collector-clock origin
BATCH_RECORDS = 1 << 16
NAMES = 3000
SYNC_NO_STREAM = 0xFFFFFFFF
KERNEL, MEMCPY, MEMSET, SYNC = 1, 2, 3, 4
# (device, stream, share of the records, what runs there)
STREAMS = (
    (0, 7, 0.46, "compute"),
    (0, 13, 0.16, "compute"),
    (0, 14, 0.05, "htod"),
    (0, 15, 0.04, "dtoh"),
    (0, 16, 0.06, "nccl"),
    (1, 7, 0.15, "compute"),
    (1, 14, 0.04, "htod"),
    (1, 16, 0.04, "nccl"),
)
SYNC_SHARE = 0.005  # of all records, host waits
BUSY_SHARE = 0.55  # of each stream's time spent running work
LONG_GAP_EVERY = 2000  # records of a stream between long gaps
LONG_GAP_SHARE = 0.25  # of a stream's idle time spent in its long gaps
COLUMNS = (
    "kind",
    "start_ns",
    "duration_ns",
    "device",
    "context",
    "stream",
    "name",
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "registers",
    "static_smem",
    "dynamic_smem",
    "bytes",
    "copy_kind",
    "src_kind",
    "dst_kind",
    "sync_type",
)


def kernel_names(n: int = NAMES) -> list[str]:
    """``n`` distinct, realistically long kernel names (templates, namespaces)."""
    families = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::{op}>",
        "ampere_sgemm_{m}x{k}_{op}_nn",
        "void cutlass::Kernel<cutlass_80_tensorop_{op}_{m}x{k}_32x3_nn_align8>",
        "ncclDevKernel_{op}_RING_LL_Sum_f32_{m}",
        "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, {m}, {k}, true, {op}>",
        "triton_poi_fused_{op}_{m}_{k}",
    )
    ops = (
        "add",
        "mul",
        "relu",
        "gelu",
        "copy",
        "layer_norm",
        "softmax",
        "AllReduce",
        "AllGather",
        "ReduceScatter",
        "dropout",
        "sigmoid",
        "tanh",
        "bias",
    )
    names: list[str] = []
    i = 0
    while len(names) < n:
        fam = families[i % len(families)]
        op = ops[(i // len(families)) % len(ops)]
        m, k = 32 << (i % 5), 16 << ((i // 7) % 6)
        names.append(fam.format(op=op, m=m, k=k) + f"_{i}")
        i += 1
    return names


def generate(records: int, seed: int = 27) -> dict[str, np.ndarray]:
    """Every record column (``tfprof.core.records.COLUMNS`` subset that GPU records
    use) of ``records`` GPU records, in completion (end time) order."""
    rng = np.random.default_rng(seed)
    span_ns = int(records / RATE_PER_S * 1e9)
    n_sync = int(records * SYNC_SHARE)
    n_work = records - n_sync
    shares = np.array([s[2] for s in STREAMS])
    per_stream = np.floor(shares / shares.sum() * n_work).astype(np.int64)
    per_stream[0] += n_work - int(per_stream.sum())
    cols: dict[str, list[np.ndarray]] = {c: [] for c in COLUMNS}

    def add(**values: np.ndarray) -> None:
        n = len(values["kind"])
        for c in COLUMNS:  # what a kind does not set is zero
            cols[c].append(np.asarray(values.get(c, np.zeros(n)), dtype=np.int64))

    zipf = 1.0 / np.arange(1, NAMES + 1) ** 1.1
    zipf /= zipf.sum()
    for (device, stream, _, role), n in zip(STREAMS, per_stream.tolist(), strict=True):
        n = int(n)
        period = span_ns / n
        if role in ("htod", "dtoh"):
            kind = np.where(rng.random(n) < 0.9, MEMCPY, MEMSET)
        elif role == "nccl":
            kind = np.full(n, KERNEL)
        else:
            kind = np.where(rng.random(n) < 0.97, KERNEL, MEMSET)
        dur = rng.lognormal(np.log(period * BUSY_SHARE) - 0.5, 1.0, n)
        dur = np.maximum(dur * (period * BUSY_SHARE * n / dur.sum()), 1).astype(np.int64)
        dur[rng.random(n) < 0.001] = 0  # CUPTI reports some zero-length records
        gap = rng.exponential(1.0, n)
        long_at = np.arange(LONG_GAP_EVERY, n, LONG_GAP_EVERY)
        idle = span_ns - int(dur.sum())
        gap *= idle * (1 - LONG_GAP_SHARE) / gap.sum()
        if long_at.shape[0]:
            gap[long_at] += idle * LONG_GAP_SHARE / long_at.shape[0]
        gap = gap.astype(np.int64)
        start = EPOCH_NS + np.cumsum(gap) + np.concatenate(([0], np.cumsum(dur)[:-1]))
        name = np.zeros(n, dtype=np.int64)
        k = kind == KERNEL
        if role == "nccl":
            name[k] = 1 + (NAMES - 1 - rng.integers(0, 12, int(k.sum())))
        else:
            name[k] = 1 + rng.choice(NAMES - 12, int(k.sum()), p=_renorm(zipf[: NAMES - 12]))
        nbytes = np.where(kind == KERNEL, 0, (1024 * 2 ** rng.uniform(0, 16, n)).astype(np.int64))
        copy_kind = np.where(kind == MEMCPY, 1 if role == "htod" else 2, 0)
        pinned = rng.random(n) < 0.7  # the rest pageable
        host_kind = np.where(pinned, 2, 1)
        src = np.where(kind == MEMCPY, host_kind if role == "htod" else 3, 0)
        src = np.where(kind == MEMSET, 3, src)
        dst = np.where(kind == MEMCPY, 3 if role == "htod" else host_kind, 0)
        geometry = name % 97
        add(
            kind=kind,
            start_ns=start,
            duration_ns=dur,
            device=np.full(n, device),
            context=np.full(n, device + 1),
            stream=np.full(n, stream),
            name=name,
            grid_x=np.where(k, 1 + geometry * 13, 0),
            grid_y=np.where(k, 1, 0),
            grid_z=np.where(k, 1, 0),
            block_x=np.where(k, 128 << (geometry % 3), 0),
            block_y=np.where(k, 1, 0),
            block_z=np.where(k, 1, 0),
            registers=np.where(k, 32 + geometry % 64, 0),
            static_smem=np.where(k, (geometry % 4) * 1024, 0),
            dynamic_smem=np.where(k, (geometry % 3) * 4096, 0),
            bytes=nbytes,
            copy_kind=copy_kind,
            src_kind=src,
            dst_kind=dst,
        )
    # Host waits: on a stream or context-wide, anywhere in the run.
    which = rng.integers(0, len(STREAMS), n_sync)
    sync_device: np.ndarray = np.array([s[0] for s in STREAMS])[which]
    sync_stream: np.ndarray = np.where(
        rng.random(n_sync) < 0.3, SYNC_NO_STREAM, np.array([s[1] for s in STREAMS])[which]
    )
    sync_start = EPOCH_NS + rng.integers(0, span_ns, n_sync)
    waits = rng.lognormal(np.log(200_000), 1.2, n_sync).astype(np.int64)
    zero = np.zeros(n_sync, dtype=np.int64)
    add(
        kind=np.full(n_sync, SYNC),
        start_ns=sync_start,
        duration_ns=waits,
        device=sync_device,
        context=sync_device + 1,
        stream=sync_stream,
        name=zero,
        sync_type=np.where(sync_stream == SYNC_NO_STREAM, 4, 3),
    )
    n = records
    out = {c: np.concatenate(v) for c, v in cols.items()}
    # Launch order is start order: correlation ids count up with it.
    by_start = np.argsort(out["start_ns"], kind="stable")
    correlation = np.empty(n, dtype=np.int64)
    correlation[by_start] = np.arange(1, n + 1)
    out["correlation"] = correlation
    done = np.argsort(out["start_ns"] + out["duration_ns"], kind="stable")
    return {c: v[done] for c, v in out.items()}


def _renorm(p: np.ndarray) -> np.ndarray:
    out: np.ndarray = p / p.sum()
    return out


def build(data_dir: Path, records: int, segments: int) -> None:
    """Store ``records`` GPU records of one process in ``data_dir`` and compact them
    into its lake in ``segments`` goes."""
    from tfprof.collector.jobdata import RECORD_COLUMNS
    from tfprof.collector.lake.location import lake_of
    from tfprof.collector.lake.publish import compact_data_dir
    from tfprof.collector.lake.segments import collector_id
    from tfprof.collector.store import Store
    from tfprof.proto import collector_pb2 as pb

    cols = generate(records)
    names = kernel_names()
    devices = [
        pb.Device(
            ordinal=d,
            uuid=f"GPU-readscale-{d}",
            name="NVIDIA H100 80GB HBM3",
            memory_bytes=80 << 30,
            sm_count=132,
            compute_capability_major=9,
        )
        for d in (0, 1)
    ]
    hello = pb.Hello(
        protocol_version=1,
        job="rank0",
        run_id="r1",
        host="node1",
        pid=4242,
        task="0",
        stream_id="s0",
        source="cupti",
        devices=devices,
    )
    store = Store(data_dir, fsync=False)
    writer = store.open_stream(hello)
    lake, collector = lake_of(data_dir), collector_id(data_dir)
    every = max(1, -(-records // BATCH_RECORDS) // max(segments, 1))
    for seq, first in enumerate(range(0, records, BATCH_RECORDS), start=1):
        batch = pb.Batch(seq=seq)
        if seq == 1:
            batch.string_base = 1
            batch.strings.extend(names)
        for c in RECORD_COLUMNS:
            values = cols.get(c)
            if values is None:
                continue
            part = values[first : first + BATCH_RECORDS]
            if part.any():  # an empty column stands for all zeros
                getattr(batch.records, c).extend(part.tolist())
        writer.append(batch)
        if seq % every == 0:
            _compact(data_dir, lake, collector, compact_data_dir)
    writer.finish(pb.Goodbye(records_sent=records))
    writer.close()
    _compact(data_dir, lake, collector, compact_data_dir)


def _compact(data_dir: Path, lake: object, collector: str, compact: object) -> None:
    _done, failed = compact(data_dir, lake, collector)  # type: ignore[operator]
    if failed:
        raise SystemExit(f"compaction failed: {failed}")


def sort_segments(data_dir: Path) -> None:
    """Rewrite each GPU table's segments of ``data_dir``'s lake sorted by start, saying
    so in the footer (``sorting_columns``): what the compaction issue 27's design
    proposes would write (same row groups otherwise; byte counts change a little)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from tfprof.collector.lake.fs import COMPRESSION, ROW_GROUP_ROWS

    for table in ("kernels", "copies", "memsets", "syncs"):
        for path in sorted((data_dir / "lake" / table).rglob("*.parquet")):
            rows = pq.read_table(path)
            rows = rows.take(pc.sort_indices(rows, [("start_ns", "ascending")]))
            at = rows.schema.get_field_index("start_ns")
            pq.write_table(
                rows,
                path,
                compression=COMPRESSION,
                row_group_size=ROW_GROUP_ROWS,
                use_dictionary=True,
                sorting_columns=[pq.SortingColumn(at)],
            )


def main() -> None:
    import argparse

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("data_dir", help="where to build it (must not exist)")
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--segments", type=int, default=10, help="compactions over the run")
    p.add_argument("--sorted", action="store_true", help="then rewrite segments in start order")
    args = p.parse_args()
    build(Path(args.data_dir), args.records, args.segments)
    if args.sorted:
        sort_segments(Path(args.data_dir))


if __name__ == "__main__":
    main()
