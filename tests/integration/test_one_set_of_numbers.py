"""One set of numbers (issue 27 item 2): every command that shows a figure of a run shows
the same one, from one definition each.

A real collector stores two jobs from real launchers replaying a real trace: one traced
throughout, one on demand in two captures of 2 s, 3 s apart. Then ``jobs``, ``sql``
(``runs``, ``kernel_summary``, ``gpu_busy``), ``summary`` (``jobs``, ``kernels-by-job``,
``gpus``), ``advise``, an export's metadata and ``top``'s snapshot are run on that data
dir, and every figure two of them share is compared:

- records (every table, whole run) and GPU records, per run;
- state, dropped records, and captured time (the union of the run's windows), per run;
- kernel count and kernel time, per job;
- GPU busy time (the union of kernels, copies and memsets) per job and GPU;
- the analyses' busy shares are of captured time: the 3 s between the captures is
  neither idle nor a gap.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .capture_jobs import MS, REPEAT, S, capture, finish, job_code, wait_for_streams
from .conftest import Collector, agent_cmd, clean_env, collector_cmd, load_trace_file
from .dense_replay import DENSE

pytestmark = pytest.mark.timeout(300)


def _job(address: str, job: str, capture_mode: str, replay: Path, sentinel: Path,
         speed: str) -> subprocess.Popen[str]:  # fmt: skip
    return subprocess.Popen(
        agent_cmd("run", "--collector", address, "--job", job, "--capture", capture_mode,
                  "--source", f"replay:{replay}", "--replay-speed", speed,
                  "--replay-repeat", REPEAT if speed == "1" else "3", "--exit-timeout", "4",
                  "--", sys.executable, "-c", job_code(sentinel)),
        env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _out(*argv: str) -> str:
    done = subprocess.run(
        collector_cmd(*argv), env=clean_env(TZ="UTC"), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{argv}: {done.stderr}"
    return done.stdout


def _json(*argv: str) -> Any:
    return json.loads(_out(*argv))


def _jobs_table(text: str) -> dict[str, dict[str, str]]:
    """``jobs``' table by job: columns are two or more spaces apart (values hold one)."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = re.split(r"\s{2,}", lines[0].strip())
    rows = {}
    for line in lines[1:]:
        if "  " not in line:
            break  # the notes under the table
        cells = re.split(r"\s{2,}", line.strip())
        rows[cells[0]] = dict(zip(header, cells, strict=False))
    return rows


def _ns(us: float) -> int:
    return round(us * 1000)


def test_every_command_shows_the_same_figures(
    traces: Path, collector: Collector, tmp_path: Path
) -> None:
    replay = traces / DENSE
    sentinel = tmp_path / "stop"
    address, data = collector.address, str(collector.data_dir)
    jobs = {
        "always": _job(address, "always", "always", replay, sentinel, "max"),
        "windows": _job(address, "windows", "on-demand", replay, sentinel, "1"),
    }
    try:
        wait_for_streams(collector.data_dir, set(jobs))
        time.sleep(1.0)
        _, first = capture(address, "--job", "windows", "--duration", "2s", "--start-in", "1s")
        time.sleep((first.end_ns - time.time_ns()) / 1e9 + 3.0)  # 3 s untraced between
        _, second = capture(address, "--job", "windows", "--duration", "2s", "--start-in", "0")
        time.sleep((second.end_ns - time.time_ns()) / 1e9 + 1.5)
    finally:
        finish(jobs, sentinel)
    time.sleep(1.0)  # the goodbyes stored

    listing = _jobs_table(_out("jobs", "--data-dir", data))
    runs = {r["job"]: r for r in _json("sql", "--data-dir", data, "--format", "json",
                                        "SELECT * FROM runs")}  # fmt: skip
    view = _json("summary", "--data-dir", data, "--view", "jobs", "--format", "json")
    summary = {r["job"]: r for r in view["rows"]}
    export = tmp_path / "all.json"
    _out("export", "--data-dir", data, "-o", str(export))
    meta = {j["name"]: j for j in load_trace_file(export)["otherData"]["jobs"]}
    top = _json("top", "--collector", address, "--once", "--format", "json", "--interval", "200ms")
    top_jobs = {j["job"]: j for j in top["jobs"]}
    kernels_sql = _json("sql", "--data-dir", data, "--format", "json",
                        "SELECT job, sum(count) AS n, sum(total_ns) AS ns FROM kernel_summary "
                        "GROUP BY job")  # fmt: skip
    by_job_sql = {r["job"]: r for r in kernels_sql}
    kernel_rows = _json("summary", "--data-dir", data, "--view", "kernels-by-job", "--format",
                        "json")["rows"]  # fmt: skip

    assert set(listing) == set(runs) == set(summary) == set(meta) == set(jobs)
    for job in jobs:
        row, run, s, m = listing[job], runs[job], summary[job], meta[job]
        # Records: every record of the run, and its GPU records, by one definition.
        records = run["records"]
        assert int(row["RECORDS"].replace(",", "")) == records == s["records"]
        assert m["records"]["total"] == records
        gpu = run["gpu_records"]
        assert int(row["GPU RECORDS"].replace(",", "")) == gpu == s["gpu_records"]
        assert m["records"]["gpu"] == gpu > 0
        # State and losses.
        assert row["STATE"] == run["state"] == "finished"
        assert int(row["DROPPED"].replace(",", "")) == run["dropped"] == s["dropped"]
        assert m["dropped"]["total"] == run["dropped"] == top_jobs[job]["dropped_total"]
        # Captured time: the union of the run's windows.
        captured = run["captured_ns"]
        assert row["CAPTURED"] == f"{captured / 1e9:,.3f} s"
        assert _ns(s["captured_us"]) == captured == m["captured_ns"]
        # Kernels.
        kernels = [r for r in kernel_rows if r["job"] == job]
        assert s["kernels"] == sum(r["count"] for r in kernels) == by_job_sql[job]["n"]
        assert s["kernels"] == top_jobs[job]["kernels_total"] > 0
        assert _ns(s["kernel_us"]) == sum(_ns(r["total_us"]) for r in kernels)
        assert _ns(s["kernel_us"]) == by_job_sql[job]["ns"]

    # The windowed run was traced for its two captures only.
    assert runs["windows"]["captured_ns"] <= (first.end_ns - first.start_ns) * 2 + 500 * MS
    assert runs["windows"]["captured_ns"] >= 3 * S

    # GPU busy: per job and GPU, the union of its kernels, copies and memsets, alike in
    # summary's gpus view, sql's gpu_busy, top and advise's evidence.
    gpus = _json("summary", "--data-dir", data, "--view", "gpus", "--format", "json")["rows"]
    busy_sql = {(r["job"], r["gpu"]): r["busy_ns"] for r in _json(
        "sql", "--data-dir", data, "--format", "json", "SELECT * FROM gpu_busy")}  # fmt: skip
    shares = {(s["job"], g["uuid"]): _ns(s["busy_us"]) for g in gpus for s in g["jobs"]}
    assert shares == busy_sql
    top_shares = {
        (s["job"], g["gpu_uuid"]): round(s["busy_seconds_total"] * 1e9)
        for g in top["gpus"]
        for s in g["jobs"]
    }
    assert top_shares == pytest.approx(shares, abs=2)  # seconds as float: a ns or two
    findings = _json("advise", "--data-dir", data, "--format", "json")["findings"]
    for f in findings:
        if f["rule"] != "gpu-idle":
            continue
        (job,) = f["jobs"]
        e = f["evidence"]
        assert _ns(e["span_us"]) - _ns(e["idle_us"]) == shares[(job, e["gpu"])]
        # Time at stake never spans the untraced time between the captures.
        assert e["longest_idle_us"] * 1000 < 3 * S
    # The timeline draws the untraced span of the windowed run.
    events = load_trace_file(export)["traceEvents"]
    untraced = [e for e in events if str(e.get("name", "")).startswith("untraced")]
    assert len(untraced) == 1 and untraced[0]["dur"] * 1000 >= 2.5 * S
