"""The short end-of-run summary the embedded collector prints (columnar, no per-record
Python objects)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tfprof.agent.frames import RecordKind
from tfprof.collector.model import JobData


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms"


def short_summary(jobs: Sequence[JobData], top: int = 5) -> str:
    lines = []
    for job in jobs:
        n_proc = len(job.streams)
        gpus = {s.device_uuid(int(d)) for s in job.streams for d in np.unique(s.records["device"])}
        counts = dict.fromkeys(RecordKind, 0)
        busy = dict.fromkeys(RecordKind, 0)
        copied = 0
        per_kernel: dict[str, list[int]] = {}
        for s in job.streams:
            kind = s.records["kind"]
            dur = s.records["duration_ns"]
            for k in RecordKind:
                mask = kind == k
                counts[k] += int(mask.sum())
                busy[k] += int(dur[mask].sum())
            copied += int(s.records["bytes"][kind == RecordKind.MEMCPY].sum())
            kmask = kind == RecordKind.KERNEL
            names, inverse = np.unique(s.records["name"][kmask], return_inverse=True)
            totals = np.bincount(inverse, weights=dur[kmask], minlength=len(names))
            calls = np.bincount(inverse, minlength=len(names))
            for idx, total, n in zip(names.tolist(), totals.tolist(), calls.tolist(), strict=True):
                name = s.strings[idx] if idx < len(s.strings) else f"<name {idx}>"
                entry = per_kernel.setdefault(name, [0, 0])
                entry[0] += int(n)
                entry[1] += int(total)
        dropped = job.dropped
        lines.append(
            f"tfprof: job {job.label}: {n_proc} traced process{'es' if n_proc != 1 else ''}, "
            f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''}"
        )
        lines.append(
            f"  kernels {counts[RecordKind.KERNEL]:,} ({_ms(busy[RecordKind.KERNEL])}), "
            f"copies {counts[RecordKind.MEMCPY]:,} ({copied / 1e6:,.1f} MB, "
            f"{_ms(busy[RecordKind.MEMCPY])}), memsets {counts[RecordKind.MEMSET]:,}; "
            f"dropped {dropped.total:,}"
        )
        ranked = sorted(per_kernel.items(), key=lambda kv: kv[1][1], reverse=True)[:top]
        total_kernel = max(1, busy[RecordKind.KERNEL])
        for name, (n, total) in ranked:
            short = name if len(name) <= 60 else name[:57] + "..."
            lines.append(
                f"    {100 * total / total_kernel:5.1f}%  {_ms(total):>14}  {n:>7,}x  {short}"
            )
    return "\n".join(lines) + "\n" if lines else "tfprof: no traced processes\n"
