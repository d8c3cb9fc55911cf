"""``tfprof-collector compact``: publish a data dir's logs as Parquet segments.

``serve`` compacts on its own; this is for data dirs written by older releases, by an
embedded collector, or while no collector runs. It resumes where any earlier compaction
stopped (each stream's watermark), so running it twice publishes nothing twice.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "compact",
        help="compact a data dir's stored streams into Parquet segments (the lake)",
        description="Publish every stream of a data dir not yet in its lake as Parquet "
        "segments, for sql and other engines (Spark, Trino). Not while a serve runs on the "
        "data dir (it compacts by itself).",
    )
    p.add_argument(
        "--data-dir", required=True, metavar="DIR", help="collector data dir (never created)"
    )
    p.add_argument(
        "--lake",
        default="",
        metavar="URL",
        help="lake to write into: a path or URL (file://, s3://, gs://) (default: the lake "
        "the data dir's serve used, else DIR/lake)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tfprof.collector.lake.location import lake_of, set_lake
    from tfprof.collector.lake.publish import compact_data_dir
    from tfprof.collector.lake.segments import collector_id
    from tfprof.collector.store import Store
    from tfprof.collector.terminal import progress

    store = Store(args.data_dir, create=False)
    root = Path(args.data_dir)
    with store.serving():  # a running serve compacts this data dir itself
        lake = set_lake(root, args.lake) if args.lake else lake_of(root)
        with progress(f"compacting {args.data_dir} into {lake.url}"):
            done, failed = compact_data_dir(root, lake, collector_id(root))
    print(
        f"compacted {done.batches:,} batches ({done.records:,} records) into {lake.url}: "
        f"{done.files:,} files, {done.bytes:,} bytes",
        file=sys.stderr,
    )
    for what in failed:
        print(f"tfprof-collector: not compacted: {what}", file=sys.stderr)
    return 1 if failed else 0
