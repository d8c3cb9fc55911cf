"""Golden outputs: every figure `tfprof-collector` shows today for the shipped real traces.

The collector's read path is being rewritten (issue 27: one engine for every view, rule
and export) and its modules moved; the figures must stay exactly those of today. This
test pins them and fails with a diff when one changes.

Regenerate after an intended change, then review ``git diff tests/data/golden``::

    TFPROF_REGEN_GOLDEN=1 .venv/bin/pytest tests/unit/test_golden_outputs.py

(each case rewrites its file and reports itself skipped).

Inputs: every trace in tests/data/traces/ (kineto-hta, tf-timeline-ikhlestov) and the
agent's demo trace, which is kineto-hta/simple_add byte for byte: it is checked against
that trace's golden files. Golden files, per trace, in tests/data/golden/<folder>/<trace>/:

- summary-file.json: ``summary --view V --format json`` for every V that
  ``summary --help`` lists, and ``advise --format json``, reading the trace file;
- summary-data-dir.json: the same on a data dir the trace was ``import``-ed into, and on
  a copy of it after ``compact`` (its streams as Parquet segments): same figures today;
- store.json: what import and compact print, ``jobs`` (text: it has no JSON form) on both
  data dirs, each as a path and as a file:// URL (the lake engine's route), and
  ``sql --format json`` over every view ``sql --help`` lists, on both;
- export.json: ``export`` to Chrome .json, .json.gz, --group-by gpu, Perfetto .pftrace,
  StepStats .pbtxt; the compacted dir's Chrome export; ``merge`` of the trace file alone;
- export-xplane.json: ``export`` to .xplane.pb (skipped without TensorFlow's protos).

Exports are read back as a viewer would (golden_viewers.py), not with tfprof's code.
tests/data/golden/merge/*.json: ``merge`` of two traces (--as steps, --as jobs).
tests/data/golden/diff/*.json: ``diff --format json`` of two traces (HTA's trace-diff
pair, two TF timeline steps).

Only the CLI's surface is used (golden_cli.py): command names, flags and output. What is
volatile is scrubbed (golden_cli.Scrub): paths of the checkout and temporary folders, run
ids (import's wall clock and a random suffix), collector ids (random), Parquet sizes
(pyarrow's version is in every file) and the tool's version; ``jobs`` runs with TZ=UTC.
Floats are compared as printed: the rendered JSON text must be identical.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.unit.golden_cli import (
    GOLDEN,
    REPO,
    Scrub,
    check,
    cli,
    cli_json,
    help_choices,
    render,
)
from tests.unit.golden_viewers import (
    chrome_view,
    perfetto_view,
    stepstats_view,
    xplane_module,
    xplane_view,
)

TRACES = REPO / "tests" / "data" / "traces"
DEMO = REPO / "agent" / "src" / "tfprof" / "agent" / "demo" / "simple_add.json.gz"


@dataclass(frozen=True)
class Trace:
    path: Path
    golden: Path  # the folder of its golden files
    owner: bool  # writes them on regeneration (the demo only compares)

    @property
    def job(self) -> str:
        return self.path.name.split(".")[0]  # the job name a trace file gets


SHIPPED = [
    Trace(p, GOLDEN / p.parent.name / p.name.split(".")[0], owner=True)
    for p in sorted(TRACES.glob("*/*.json*"))
]
CASES = {f"{t.path.parent.name}/{t.job}": t for t in SHIPPED}
CASES["agent-demo/simple_add"] = Trace(DEMO, GOLDEN / "kineto-hta" / "simple_add", owner=False)


@dataclass
class Stored:
    """A trace imported into a data dir, and a copy of that dir compacted to its lake."""

    data_dir: Path
    lake_dir: Path
    scrub: Scrub
    imported: list[str]
    compacted: list[str]


class Stores:
    """Each case's trace imported (and compacted) once per module, when first asked for."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._made: dict[str, Stored] = {}

    def __call__(self, case: str) -> Stored:
        if case not in self._made:
            trace = CASES[case]
            work = self._root / case.replace("/", "-")
            scrub = Scrub({trace.path: "<TRACE>", TRACES: "<TRACES>", work: "<TMP>"})
            data_dir, lake_dir = work / "data", work / "lake"
            _, imported = cli("import", "--job", trace.job, "--data-dir", data_dir, trace.path)
            shutil.copytree(data_dir, lake_dir)
            _, compacted = cli("compact", "--data-dir", lake_dir)
            self._made[case] = Stored(
                data_dir, lake_dir, scrub, scrub.lines(imported), scrub.lines(compacted)
            )
        return self._made[case]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Stores:
    return Stores(tmp_path_factory.mktemp("golden"))


@cache
def views() -> list[str]:
    return help_choices("summary", r"--view \{([^}]*)\}")


@cache
def sql_views() -> list[str]:
    return help_choices("sql", r"and views \(([^)]*)\)")


ROUTES = ("file", "data-dir", "lake")


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("case", CASES)
def test_summary_and_advise(case: str, route: str, stores: Stores) -> None:
    trace, stored = CASES[case], stores(case)
    source = {
        "file": [str(trace.path)],
        "data-dir": ["--data-dir", str(stored.data_dir)],
        "lake": ["--data-dir", str(stored.lake_dir)],
    }[route]
    doc = {v: cli_json("summary", *source, "--view", v, "--format", "json") for v in views()}
    doc["advise"] = cli_json("advise", *source, "--format", "json")
    # The lake holds the same records as the data dir it was compacted from: both routes
    # must show the same figures (they do today), so they share one golden file.
    golden = "summary-file.json" if route == "file" else "summary-data-dir.json"
    check(trace.golden / golden, stored.scrub.doc(doc), trace.owner and route != "lake")


@pytest.mark.parametrize("case", CASES)
def test_store_jobs_and_sql(case: str, stores: Stores) -> None:
    trace, stored = CASES[case], stores(case)
    doc: dict[str, Any] = {"import": stored.imported, "compact": stored.compacted}
    for name, folder in (("data-dir", stored.data_dir), ("lake", stored.lake_dir)):
        for shown in (str(folder), folder.as_uri()):
            out, err = cli("jobs", "--data-dir", shown)
            label = f"jobs {name}" + (" (file:// URL)" if shown.startswith("file:") else "")
            doc[label] = stored.scrub.table(out + err)
        # A view's rows come in no set order: ORDER BY ALL makes it one.
        sql = ["sql", "--data-dir", str(folder), "--format", "json"]
        doc[f"sql {name}"] = {
            v: cli_json(*sql, f"SELECT * FROM {v} ORDER BY ALL") for v in sql_views()
        }
    check(trace.golden / "store.json", stored.scrub.doc(doc), trace.owner)


def written(
    scrub: Scrub, view: Callable[[Path], Any], path: Path, *argv: str | Path
) -> dict[str, Any]:
    """Run a command that writes ``path``; what it said and the file read back."""
    out, err = cli(*argv, "-o", path)
    return {"printed": scrub.lines(out + err), "read back": view(path)}


@pytest.mark.parametrize("case", CASES)
def test_exports(case: str, stores: Stores) -> None:
    trace, stored = CASES[case], stores(case)
    out = stored.data_dir.parent / "exports"
    out.mkdir(exist_ok=True)
    s, dd = stored.scrub, ["--data-dir", str(stored.data_dir)]
    doc = {
        "export .json": written(s, chrome_view, out / "t.json", "export", *dd),
        "export .json.gz": written(s, chrome_view, out / "t.json.gz", "export", *dd),
        "export --group-by gpu .json": written(
            s, chrome_view, out / "g.json", "export", *dd, "--group-by", "gpu"
        ),
        "export .pftrace": written(s, perfetto_view, out / "t.pftrace", "export", *dd),
        "export .pbtxt": written(s, stepstats_view, out / "t.pbtxt", "export", *dd),
        "export .json (lake)": written(
            s, chrome_view, out / "l.json", "export", "--data-dir", stored.lake_dir
        ),
        "merge .json (the trace file)": written(
            s, chrome_view, out / "m.json", "merge", trace.path
        ),
    }
    check(trace.golden / "export.json", same_as_earlier(s.doc(doc)), trace.owner)


def same_as_earlier(doc: dict[str, Any]) -> dict[str, Any]:
    """A file read back exactly as an earlier one (.json.gz as .json, say) is shown as
    "same as" that one: the equality is pinned and the golden file stays short."""
    seen: dict[str, str] = {}
    for key, entry in doc.items():
        text = render(entry["read back"])
        if text in seen:
            entry["read back"] = f"same as {seen[text]!r}"
        else:
            seen[text] = key
    return doc


@pytest.mark.parametrize("case", CASES)
def test_xplane_export(case: str, stores: Stores) -> None:
    xplane_pb2 = xplane_module()
    if xplane_pb2 is None:
        pytest.skip("XPlane needs TensorFlow's protos (pip install tensorflow-cpu)")
    trace, stored = CASES[case], stores(case)
    path = stored.data_dir.parent / "t.xplane.pb"

    def view(p: Path) -> Any:
        return xplane_view(p, xplane_pb2)

    doc = written(stored.scrub, view, path, "export", "--data-dir", stored.data_dir)
    check(trace.golden / "export-xplane.json", stored.scrub.doc(doc), trace.owner)


KINETO, TF = TRACES / "kineto-hta", TRACES / "tf-timeline-ikhlestov"
MERGES = {
    "tf-steps": (
        ["--as", "steps"],
        [TF / "GPU_timeline_02_step_1.json", TF / "GPU_timeline_02_step_2.json"],
        ".json.gz",
    ),
    "kineto-jobs": (
        ["--as", "jobs"],
        [KINETO / "simple_add.json.gz", KINETO / "event_sync_multi_stream.json.gz"],
        ".json",
    ),
}


@pytest.mark.parametrize("name", MERGES)
def test_merge_two_traces(name: str, tmp_path: Path) -> None:
    how, inputs, chrome = MERGES[name]
    scrub = Scrub({TRACES: "<TRACES>", tmp_path: "<TMP>"})
    merged = tmp_path / f"merged{chrome}"
    doc = {
        f"merge {chrome}": written(scrub, chrome_view, merged, "merge", *how, *inputs),
        "merge .pftrace": written(
            scrub, perfetto_view, tmp_path / "merged.pftrace", "merge", *how, *inputs
        ),
        # The merged file read as a trace file again: its jobs and their record counts.
        f"summary --view jobs (the merged {chrome})": cli_json(
            "summary", merged, "--view", "jobs", "--format", "json"
        ),
    }
    check(GOLDEN / "merge" / f"{name}.json", scrub.doc(doc))


PAIR = TRACES / "hta-trace-diff" / "trace_diff"
DIFFS: dict[str, tuple[list[Path], list[list[str]]]] = {
    # HTA's real control / test pair: the phases and collectives whole, the 30 rows that
    # changed most per step, and TraceDiff's default (each side's first step).
    "hta-trace-diff": (
        [PAIR / "control" / "control.json.gz", PAIR / "test" / "test.json.gz"],
        [["--kind", "phase,collective"], ["--top", "30"], ["--steps", "first", "--top", "30"]],
    ),
    # Two TF timeline steps: no step markers, the whole file is one step.
    "tf-steps": (
        [TF / "GPU_timeline_02_step_1.json", TF / "GPU_timeline_02_step_2.json"],
        [[]],
    ),
}


@pytest.mark.parametrize("name", DIFFS)
def test_diff_two_traces(name: str) -> None:
    inputs, variants = DIFFS[name]
    scrub = Scrub({TRACES: "<TRACES>"})
    doc = {
        f"diff {' '.join(how)}".strip(): cli_json("diff", *inputs, *how, "--format", "json")
        for how in variants
    }
    check(GOLDEN / "diff" / f"{name}.json", scrub.doc(doc))
