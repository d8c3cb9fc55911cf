"""deploy/grafana's board asks only for metrics and labels a collector really exposes:
every metric an expression names has samples, with every label it groups or filters by,
in the exposition of a CollectorMetrics fed through the real ingest path."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.unit.live_records import copy, hello, kernel, records
from tfprof.collector.service.ingest import IngestStream
from tfprof.collector.service.metrics import CollectorMetrics
from tfprof.collector.store import Store
from tfprof.proto import collector_pb2 as pb

BOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "tfprof-jobs-gpus.json"
METRIC = re.compile(r"\b(tfprof_[a-z_]+)\b")
# Labels an expression uses: `by (a, b)` and `{a=~"..", b="..."}`.
GROUPED = re.compile(r"\bby\s*\(([^)]*)\)")
SELECTOR = re.compile(r"(tfprof_[a-z_]+)\{([^}]*)\}")


def exposed_labels(tmp_path: Path) -> dict[str, set[str]]:
    """Sample name -> label names, from a collector that has stored a little of
    everything (kernels, copies, drops, an open stream)."""
    metrics = CollectorMetrics()
    ingest = IngestStream(Store(tmp_path / "data"), metrics)
    ingest.hello(hello("train"))
    ingest.batch(pb.Batch(seq=1, records=records(kernel(0, 10), copy(1, 64)), dropped=2))
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    ingest.close()
    return labels


def expressions(board: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in board["templating"]["list"] if v["type"] == "query"]
    return exprs


def test_every_query_names_exposed_metrics_and_labels(tmp_path: Path) -> None:
    board = json.loads(BOARD.read_text())
    exposed = exposed_labels(tmp_path)
    checked = set()
    for expr in expressions(board):
        names = METRIC.findall(expr)
        assert names, expr
        for name in names:
            assert name in exposed, f"{name} (in {expr!r}) is not exposed"
            checked.add(name)
        for group in GROUPED.findall(expr):
            wanted = {g.strip() for g in group.split(",")}
            assert all(wanted <= exposed[n] for n in names), f"{wanted} in {expr!r}"
        for name, selector in SELECTOR.findall(expr):
            wanted = {part.split("=")[0].rstrip("=~!").strip() for part in selector.split(",")}
            assert wanted <= exposed[name], f"{wanted - exposed[name]} not on {name}"
        for var in re.findall(r"label_values\((\w+),\s*(\w+)\)", expr):
            assert var[1] in exposed[var[0]], expr
    assert "tfprof_gpu_busy_seconds_total" in checked


def test_panels_have_unique_ids_and_use_the_datasource_variable() -> None:
    board = json.loads(BOARD.read_text())
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}"
