"""``sql`` reads the lake and nothing else unless asked (issue 23 item 6): DuckDB with
external access off, extensions neither installed nor loaded, settings locked. What it
refuses is one line naming the setting (exit status 2) and writes nothing; with
``--allow-external`` the same query runs; every table and view still answers."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from tfprof.collector.cli import main
from tfprof.collector.lake.schema import TABLES
from tfprof.collector.lake.views import VIEWS
from tfprof.collector.store import Store
from tfprof.proto import collector_pb2 as pb


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    store = Store(d, fsync=False)
    w = store.open_stream(pb.Hello(protocol_version=1, job="j", run_id="r", host="h", pid=1,
                                   task="0", stream_id="s"))  # fmt: skip
    batch = pb.Batch(seq=1, string_base=1, strings=["k"])
    batch.records.kind.append(pb.KERNEL)
    batch.records.start_ns.append(10**18)
    batch.records.duration_ns.append(5)
    batch.records.name.append(1)
    w.append(batch)
    w.finish(pb.Goodbye(records_sent=1))
    w.close()
    return d


@pytest.mark.parametrize(
    ("query", "setting"),
    [
        ("SELECT * FROM read_csv('/etc/passwd')", "enable_external_access=false"),
        ("COPY (SELECT 42) TO '{out}'", "enable_external_access=false"),
        ("ATTACH '{out}.duckdb' AS other", "enable_external_access=false"),
        ("INSTALL httpfs", "enable_external_access=false"),
        ("SET threads = 1", "lock_configuration=true"),
        ("SET enable_external_access = true", "lock_configuration=true"),
    ],
)
def test_sql_refuses_what_is_not_reading_the_lake(
    data_dir: Path, tmp_path: Path, query: str, setting: str
) -> None:
    out = tmp_path / "written.csv"
    code, _, err = _run("sql", "--data-dir", str(data_dir), query.format(out=out))
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and setting in err and "--allow-external" in err
    assert not out.exists() and not Path(f"{out}.duckdb").exists()


def test_allow_external_opts_in(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "written.csv"
    code, _, err = _run("sql", "--allow-external", "--data-dir", str(data_dir),
                        f"COPY (SELECT 42 AS answer) TO '{out}'")  # fmt: skip
    assert code == 0, err
    assert out.read_text().split() == ["answer", "42"]


@pytest.mark.parametrize("name", [*TABLES, *VIEWS])
def test_every_table_and_view_still_answers(data_dir: Path, name: str) -> None:
    code, _, err = _run("sql", "--data-dir", str(data_dir), "--format", "json",
                        f"SELECT count(*) AS n FROM {name}")  # fmt: skip
    assert code == 0, err
