"""Where writing a ``.pftrace`` spends its CPU: the three stages the writer overlaps on
its pipeline, timed one after another on one thread, over one large timeline
(``export_vs_tf_timeline.make_job``'s, as ``bench/export_formats.py`` builds it):

- laying the blocks out (``PerfettoReporter._event_packets``: slices a kind at a time,
  columns gathered, varints encoded);
- making their bytes (``Packets.finish``: the byte matrix of each block);
- deflating them, with ISA-L level 1 (what the writer uses) and, for comparison, every
  other deflate this environment has (zlib always; ISA-L level 0, zlib-ng, libdeflate
  when installed).

Prints CPU seconds (the best of ``--repeat`` runs) and sizes; asserts nothing.

    .venv/bin/python bench/perfetto_stages.py --records 1000000
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _at_level(compress: Callable[[bytes, int], bytes], level: int) -> Callable[[bytes], bytes]:
    return lambda data: compress(data, level)  # each takes (data, level) positionally


def _compressors() -> dict[str, Callable[[bytes], bytes]]:
    found: dict[str, Callable[[bytes], bytes]] = {"zlib 1": _at_level(zlib.compress, 1)}
    for label, module, function, level in (
        ("isal 1", "isal.isal_zlib", "compress", 1),
        ("isal 0", "isal.isal_zlib", "compress", 0),
        ("zlib-ng 1", "zlib_ng.zlib_ng", "compress", 1),
        ("libdeflate 1", "deflate", "zlib_compress", 1),
    ):
        try:
            compress = getattr(importlib.import_module(module), function)
        except ImportError:
            print(f"({label}: not installed)")
            continue
        found[label] = _at_level(compress, level)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from bench.export_vs_tf_timeline import make_job
    from tfprof.collector.export.perfetto import PerfettoReporter
    from tfprof.collector.merged.whole import build_timeline

    timeline = build_timeline([make_job(args.records)])
    layout = finish = float("inf")
    blocks: list[bytes] = []
    for _ in range(args.repeat):
        reporter = PerfettoReporter(timeline)
        t0 = time.process_time()
        laid = [p for part in timeline.parts() for p in reporter._event_packets(part)]
        t1 = time.process_time()
        blocks = [bytes(p.finish()) for p in laid]
        t2 = time.process_time()
        layout, finish = min(layout, t1 - t0), min(finish, t2 - t1)
    raw = sum(map(len, blocks))
    per_million = 1e6 / args.records
    print(f"{args.records:,} records, {timeline.num_slices:,} slices, {len(blocks)} blocks, "
          f"{raw / 1e6:.1f} MB of packets before deflate (best of {args.repeat})")  # fmt: skip
    print(f"{'stage':<22} {'cpu s/1M':>9} {'MB/1M':>7}")
    print(f"{'laying out':<22} {layout * per_million:>9.3f}")
    print(f"{'bytes':<22} {finish * per_million:>9.3f} {raw / 1e6 * per_million:>7.1f}")
    for label, compress in _compressors().items():
        best, size = float("inf"), 0
        for _ in range(args.repeat):
            t0 = time.process_time()
            size = sum(len(compress(b)) for b in blocks)
            best = min(best, time.process_time() - t0)
        print(
            f"{'deflate ' + label:<22} {best * per_million:>9.3f} {size / 1e6 * per_million:>7.1f}"
        )


if __name__ == "__main__":
    main()
