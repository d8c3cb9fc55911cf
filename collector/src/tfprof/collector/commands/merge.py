"""``tfprof-collector merge``: ``export`` for trace files, kept as an alias for scripts.

Same inputs (``IN ...``, ``--as``, ``--shift``), same output options, same code path
(``export.run``); only the files are required here.
"""

from __future__ import annotations

import argparse

from tfprof.collector.commands.export import add_file_options, add_output_options


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "merge",
        help="export for trace files (an alias kept for scripts)",
        description="The same as `tfprof-collector export IN... -o OUT`: merge trace files "
        "(any format `import` reads) into one timeline with the same track names as "
        "export. --as steps: the files are successive steps of one job and share its "
        "tracks, one after another; --as jobs: each file is a job of its own, on its own "
        "tracks, side by side. tfprof's own files keep the jobs and tasks they were "
        "recorded with; other formats are named after the file. `export` also takes stored "
        "jobs (--data-dir) and a running collector (--collector).",
    )
    add_file_options(p, required=True)
    add_output_options(p)
    p.set_defaults(func=run, data_dir=None, job=None, capture=None, collector=None)


def run(args: argparse.Namespace) -> int:
    from tfprof.collector.commands.export import run as export

    return export(args)
