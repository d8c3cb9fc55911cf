"""Write the reference pages of the docs site (docs/reference/) from the code.

The pages say what the code says: both CLIs from their argparse builders, the agent's
``TFPROF_*`` variables from its option table, the collector's settings from its option
table, the lake's tables, columns and SQL views from the schema and view modules, and
the Prometheus metrics from a live metrics registry. Nothing here is written by hand, so
a page cannot drift from the code unnoticed: ``--check`` renders every page in memory
and exits 1, naming each stale page, when a file differs (CI and a unit test run it). It
also names a bench/results file that no benchmark page includes.

    python scripts/gen_reference.py            # rewrite docs/reference/*.md
    python scripts/gen_reference.py --check    # exit 1 and name the stale pages
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
from reference_render import MARKER, cli_page, code, header, prose, subcommands, text

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# -- settings ------------------------------------------------------------------------------


def agent_settings_page() -> str:
    from tfprof.agent import cli
    from tfprof.agent.inprocess.config import OPTIONS

    flags: dict[str, list[str]] = {}
    for name, _, sub in subcommands(cli.build_parser()):
        for action in sub._actions:
            if action.dest in OPTIONS and action.option_strings:
                flags.setdefault(action.dest, []).append(f"{name} {action.option_strings[-1]}")
    lines = header(
        "Agent settings: `TFPROF_*`", ["agent/src/tfprof/agent/inprocess/config.py (OPTIONS)"]
    )
    lines += [
        "Every setting of the launcher, the node daemon and the in-process hook is an "
        "environment variable. A flag of `tfprof-agent` only sets its variable, so the "
        "launcher and every traced process read one configuration. The hook reads these in "
        "the job's own processes: a job started with `tfprof-agent env`'s environment needs "
        "no flags.",
        "",
    ]
    internal = {k for k, o in OPTIONS.items() if o.doc.startswith(("(internal)", "(tests"))}
    sections = {
        "Settings": [k for k in OPTIONS if k not in internal],
        "Set by tfprof for the job's processes (not by users)": [
            k for k in OPTIONS if k in internal
        ],
    }
    for title, keys in sections.items():
        lines += [f"## {title}", "", "| variable | flag | default | meaning |", "|---|---|---|---|"]
        for key in keys:
            opt = OPTIONS[key]
            flag = "<br>".join(code(f) for f in flags.get(key, []))
            default = code(opt.default) if opt.default else text(cli.EMPTY_DEFAULTS.get(key, ""))
            lines.append(f"| {code(opt.env)} | {flag} | {default} | {text(opt.doc)} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def collector_settings_page() -> str:
    from tfprof.collector import config

    lines = header(
        "Collector settings: `tfprof-collector serve`",
        ["collector/src/tfprof/collector/config.py (OPTIONS)"],
    )
    lines += [
        "Every option of `tfprof-collector serve` is a flag, a key of a TOML config file "
        f"(`--config FILE` or `{config.CONFIG_ENV}`; `data-dir` and `data_dir` are the same "
        "key) and an environment variable. Precedence: flags, then the config file, then the "
        "environment, then the defaults. A bad value stops the collector with one line "
        "naming the option and where its value came from (exit status 2).",
        "",
        "| flag | TOML key | variable | default | meaning |",
        "|---|---|---|---|---|",
    ]
    for key, opt in config.OPTIONS.items():
        toml = key.replace("_", "-")
        lines.append(
            f"| {code(config.flag_name(key))} | {code(toml)} | {code(opt.env)} "
            f"| {code(opt.default)} | {text(opt.doc)} |"
        )
    lines.append(
        f"| `--config FILE` | | {code(config.CONFIG_ENV)} | | the TOML file of these settings |"
    )
    return "\n".join(lines).rstrip() + "\n"


# -- the lake ------------------------------------------------------------------------------


def arrow_type(t: pa.DataType) -> str:
    if pa.types.is_dictionary(t):
        return f"dictionary<{arrow_type(t.index_type)}, {arrow_type(t.value_type)}>"
    if pa.types.is_list(t):
        return f"list<{arrow_type(t.value_type)}>"
    if pa.types.is_struct(t):
        fields = ", ".join(f"{f.name}: {arrow_type(f.type)}" for f in t)
        return f"struct<{fields}>"
    return str(t)


def view_columns() -> dict[str, list[str]]:
    """Each SQL view's columns, from DuckDB over empty tables of the lake's schema."""
    import duckdb

    from tfprof.collector.lake.schema import TABLES
    from tfprof.collector.lake.views import LIVE_STREAMS, VIEWS

    con = duckdb.connect()
    try:
        for table in TABLES.values():
            con.register(table.name, table.full_schema.empty_table())
        con.register("live_streams", LIVE_STREAMS.empty_table())
        columns = {}
        for name, sql in VIEWS.items():
            con.execute(f"CREATE VIEW {name} AS {sql}")
            columns[name] = [row[0] for row in con.execute(f"DESCRIBE {name}").fetchall()]
        return columns
    finally:
        con.close()


def lake_page() -> str:
    from tfprof.collector.lake import views
    from tfprof.collector.lake.schema import PARTITION, PER_STREAM, TABLES

    lines = header(
        "Lake tables and SQL views",
        [
            "collector/src/tfprof/collector/lake/schema.py",
            "collector/src/tfprof/collector/lake/views.py",
        ],
    )
    partition = ", ".join(f"`{f.name}`" for f in PARTITION)
    lines += [
        f"Every table is hive-partitioned by {partition} (strings that live in the path, "
        "not in the files): `<lake>/<table>/job=<job>/run=<run>/<segment>.parquet`. "
        "Tables with one file per stream: "
        + ", ".join(f"`{t}`" for t in sorted(PER_STREAM))
        + "; the others get one file per compacted range of batches. What the lake is and "
        "how it is written: [the lake](../concepts/lake.md).",
        "",
        "| table | rows |",
        "|---|---|",
    ]
    lines += [f"| [`{t.name}`](#{t.name}) | {text(t.doc)} |" for t in TABLES.values()]
    lines.append("")
    for table in TABLES.values():
        lines += [f"## `{table.name}`", "", text(table.doc), ""]
        lines += ["| column | Arrow type | unit | meaning |", "|---|---|---|---|"]
        for c in table.columns:
            lines.append(
                f"| {code(c.name)} | {code(arrow_type(c.type))} | {text(c.unit)} | {text(c.doc)} |"
            )
        lines.append("")
    lines += [
        "## SQL views",
        "",
        "`tfprof-collector sql` defines these views over the tables above (in this order: "
        "later ones read earlier ones). The SQL is the code's own; paste it into another "
        "engine to get the same rows.",
        "",
    ]
    lines += prose(views.__doc__ or "")
    columns = view_columns()
    for name, sql in views.VIEWS.items():
        listed = ", ".join(f"`{c}`" for c in columns[name])
        lines += [f"### `{name}`", "", f"Columns: {listed}.", ""]
        lines += ["```sql", *sql.strip().splitlines(), "```", ""]
    return "\n".join(lines).rstrip() + "\n"


# -- metrics -------------------------------------------------------------------------------


def metrics_page() -> str:
    from prometheus_client.metrics import MetricWrapperBase

    from tfprof.collector.service.metrics import LIVE_FAMILIES, CollectorMetrics

    metrics = CollectorMetrics()
    # Label names: a labelled Counter keeps them only on the wrapper object.
    labels: dict[str, list[str]] = {name: list(spec[2]) for name, spec in LIVE_FAMILIES.items()}
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            labels[value._name] = list(value._labelnames)
    lines = header(
        "Prometheus metrics",
        ["collector/src/tfprof/collector/service/metrics.py"],
    )
    lines += [
        "`tfprof-collector serve --metrics-listen HOST:PORT` serves these at "
        "`http://HOST:PORT/metrics`. Counters are exposed with the `_total` suffix. "
        "`tfprof-collector top` and `deploy/grafana/tfprof-jobs-gpus.json` read them.",
        "",
        "| metric | type | labels | meaning |",
        "|---|---|---|---|",
    ]
    for family in metrics.registry.collect():
        exposed = family.name + ("_total" if family.type == "counter" else "")
        names = ", ".join(f"`{n}`" for n in labels.get(family.name, []))
        lines.append(
            f"| {code(exposed)} | {family.type} | {names} | {text(family.documentation)} |"
        )
    return "\n".join(lines).rstrip() + "\n"


# -- pages, writing, checking ----------------------------------------------------------------


def pages() -> dict[str, str]:
    """Every generated page, by its path under docs/."""
    from tfprof.agent import cli as agent_cli
    from tfprof.collector import cli as collector_cli

    return {
        "reference/tfprof-agent.md": cli_page(
            "tfprof-agent", agent_cli.build_parser(), "agent/src/tfprof/agent/cli.py"
        ),
        "reference/tfprof-collector.md": cli_page(
            "tfprof-collector",
            collector_cli.build_parser(),
            "collector/src/tfprof/collector/cli.py and commands/",
        ),
        "reference/agent-settings.md": agent_settings_page(),
        "reference/collector-settings.md": collector_settings_page(),
        "reference/lake.md": lake_page(),
        "reference/metrics.md": metrics_page(),
    }


def stale(docs: Path, rendered: dict[str, str]) -> list[str]:
    """Pages under ``docs`` that differ from ``rendered``, are missing, or carry the
    generated marker but are generated no more."""
    out = []
    for rel, content in rendered.items():
        path = docs / rel
        if not path.exists() or path.read_text(encoding="utf-8") != content:
            out.append(rel)
    for path in sorted(docs.rglob("*.md")):
        rel = path.relative_to(docs).as_posix()
        if rel not in rendered and path.read_text(encoding="utf-8").startswith(MARKER):
            out.append(rel)
    return out


def unlisted_results(docs: Path, results: Path = ROOT / "bench" / "results") -> list[str]:
    """Files of bench/results that no benchmark page includes (with the snippets
    extension: ``--8<-- "bench/results/NAME"``)."""
    pages = "".join(p.read_text(encoding="utf-8") for p in (docs / "benchmarks").glob("*.md"))
    return [
        f"bench/results/{f.name}"
        for f in sorted(results.iterdir())
        if f.is_file() and f'"bench/results/{f.name}"' not in pages
    ]


def write(docs: Path, rendered: dict[str, str]) -> list[str]:
    changed = stale(docs, rendered)
    for rel in changed:
        path = docs / rel
        if rel in rendered:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(rendered[rel], encoding="utf-8")
        else:
            path.unlink()
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 naming each stale page"
    )
    parser.add_argument("--docs-dir", type=Path, default=DOCS, help="default: docs/")
    args = parser.parse_args(argv)
    rendered = pages()
    if args.check:
        found = stale(args.docs_dir, rendered)
        for rel in found:
            print(
                f"gen_reference: {args.docs_dir / rel} is stale: "
                "run python scripts/gen_reference.py",
                file=sys.stderr,
            )
        unlisted = unlisted_results(args.docs_dir)
        for name in unlisted:
            print(f"gen_reference: {name} is on no page of docs/benchmarks/", file=sys.stderr)
        return 1 if found or unlisted else 0
    for rel in write(args.docs_dir, rendered):
        print(f"gen_reference: wrote {args.docs_dir / rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
