"""A damaged file of the lake costs its own rows only (issue 23 item 5).

One file of every table of one job's run is damaged (cut short: its footer gone), in a
data dir a running collector serves and in a copy of it. Every reader of the lake
(``jobs``, ``summary``, ``advise``, ``export``, ``sql``, ``diff``) exits 0, says each file it
could not read in one line naming the file, the job and run and the rows the lake's
own bookkeeping says it held, and shows the other job exactly as before; ``jobs``
marks the run damaged.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.collector_proc import start_serve
from tests.integration.conftest import clean_env, collector_cmd
from tfprof.collector.lake.schema import TABLES
from tfprof.collector.store import Store
from tfprof.proto import collector_pb2 as pb

pytestmark = pytest.mark.timeout(300)
T0 = 1_780_000_000 * 10**9


def _stream(store: Store, job: str, data: Path) -> None:
    """A run with a row in every table: each record kind, host samples, Python stacks, a
    device, queue drops (a log_state row), a goodbye; compacted after each of its two
    batches (two ranges of files)."""
    hello = pb.Hello(protocol_version=1, job=job, run_id="r1", host="node1", pid=7, task="0",
                     stream_id="s0", capture_mode="always",
                     devices=[pb.Device(ordinal=0, uuid=f"GPU-{job}", name="H100")])  # fmt: skip
    w = store.open_stream(hello)
    for seq in (1, 2):
        b = pb.Batch(seq=seq, dropped=3 * seq)
        if seq == 1:
            b.string_base = 1
            b.strings.extend(["gemm", "cudaLaunchKernel", "step"])
        r = b.records
        t = T0 + seq * 10**9
        rows = [  # kind, start, duration, name, copy kind, bytes, thread, correlation
            (pb.KERNEL, t, 500, 1, 0, 0, 0, 1), (pb.MEMCPY, t + 600, 200, 0, 1, 4096, 0, 2),
            (pb.MEMSET, t + 900, 50, 0, 0, 64, 0, 3), (pb.SYNC, t + 1000, 70, 0, 0, 0, 0, 0),
            (pb.API, t - 100, 20, 2, 0, 0, 11, 1), (pb.MARKER, t - 200, 2000, 3, 0, 0, 11, 0),
            (pb.MEMORY, t - 300, 0, 0, 0, 1 << 20, 11, 0), (pb.STEP, t - 400, 3000, 0, 0, 0, 11, 0),
        ]  # fmt: skip
        for kind, start, dur, name, ck, nbytes, thread, corr in rows:
            r.kind.append(kind)
            r.start_ns.append(start)
            r.duration_ns.append(dur)
            r.name.append(name)
            r.copy_kind.append(ck)
            r.bytes.append(nbytes)
            r.thread.append(thread)
            r.correlation.append(corr)
            r.memory_op.append(1 if kind == pb.MEMORY else 0)
        if seq == 1:  # a stack tree (the stacks table) and a launch stack sample
            b.stacks.frame_base, b.stacks.node_base = 1, 1
            b.stacks.frame_file.append(1)
            b.stacks.frame_line.append(3)
            b.stacks.frame_function.append(2)
            b.stacks.frame_first_line.append(1)
            b.stacks.node_parent.append(0)
            b.stacks.node_frame.append(1)
        b.stacks.time_ns.append(t - 100)
        b.stacks.stack.append(1)
        b.stacks.kind.append(pb.STACK_LAUNCH)
        b.stacks.correlation.append(1)
        b.host.time_ns.append(t)
        b.host.cpu_percent.append(50.0)
        b.host.rss_bytes.append(1 << 30)
        b.host.threads.append(4)
        b.host.read_bytes.append(0)
        b.host.write_bytes.append(0)
        w.append(b)
        if seq == 1:
            _run("compact", "--data-dir", str(data))
    w.finish(pb.Goodbye(records_sent=16, dropped_queue=6))
    w.close()


def _run(*argv: str) -> tuple[str, str]:
    done = subprocess.run(collector_cmd(*argv), env=clean_env(TZ="UTC"), capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, f"{argv}: {done.stderr}"
    return done.stdout, done.stderr


def _readers(data: Path, out: Path) -> dict[str, tuple[str, str]]:
    d = str(data)
    return {
        "jobs": _run("jobs", "--data-dir", d),
        "jobs (lake)": _run("jobs", "--data-dir", data.as_uri()),
        "summary": _run("summary", "--data-dir", d, "--view", "jobs", "--format", "json"),
        "summary gpus": _run("summary", "--data-dir", d, "--view", "gpus", "--format", "json"),
        "summary api": _run("summary", "--data-dir", d, "--view", "api", "--format", "json"),
        "advise": _run("advise", "--data-dir", d, "--format", "json"),
        "export": _run("export", "--data-dir", d, "-o", str(out)),
        "sql": _run("sql", "--data-dir", d, "--format", "json",
                    "SELECT job, count(*) AS n FROM kernels GROUP BY job ORDER BY job"),
        "diff": _run("diff", "--data-dir", d, "good", "bad", "--format", "json"),
    }  # fmt: skip


def _good(outputs: dict[str, tuple[str, str]]) -> dict[str, object]:
    """What every reader says of the job whose files are whole."""
    summary = json.loads(outputs["summary"][0])
    sql = json.loads(outputs["sql"][0])
    return {
        "jobs": [  # cells: a wider column elsewhere pads them otherwise
            re.split(r"\s{2,}", line) for line in outputs["jobs"][0].splitlines()
            if line.startswith("good ")
        ],
        "summary": [r for r in summary["rows"] if r["job"] == "good"],
        "gpus": [r for r in json.loads(outputs["summary gpus"][0])["rows"]
                 if r["uuid"] == "GPU-good"],
        "sql": [r for r in sql if r["job"] == "good"],
    }  # fmt: skip


def _damage(data: Path) -> list[Path]:
    """Cut one file of every table of job bad short (its footer gone): of the first
    range, and the bookkeeping of the second."""
    cut = []
    for table in TABLES:
        files = sorted((data / "lake" / table / "job=bad").rglob("*.parquet"))
        assert files, table
        path = files[-1 if table == "segments" else 0]
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        cut.append(path)
    return cut


@pytest.mark.parametrize("where", ["served", "copy"])
def test_every_reader_skips_a_damaged_file_and_goes_on(tmp_path: Path, where: str) -> None:
    data = tmp_path / "data"
    store = Store(data, fsync=False)
    for job in ("good", "bad"):
        _stream(store, job, data)
    _run("compact", "--data-dir", str(data))
    before = _good(_readers(data, tmp_path / "before.json"))
    if where == "copy":
        shutil.copytree(data, tmp_path / "copy")
        data = tmp_path / "copy"
    cut = _damage(data)
    serve = start_serve(data) if where == "served" else None
    try:
        outputs = _readers(data, tmp_path / "after.json")
    finally:
        if serve is not None:
            assert serve.terminate() == 0
    assert _good(outputs) == before
    said: set[str] = set()
    for reader, (out, err) in outputs.items():
        for line in (err + out).splitlines():
            if "skipped " in line and "job bad run r1" in line:
                said |= {str(p) for p in cut if str(p) in line}
        assert "Traceback" not in err, (reader, err)
    assert said == {str(p) for p in cut}
    # The bookkeeping says what each record file held (one batch, a row per kind).
    jobs = outputs["jobs"][0]
    bad = next(re.split(r"\s{2,}", line) for line in jobs.splitlines() if line.startswith("bad "))
    assert bad[2] == "finished, damaged"
    kernels = next(p for p in cut if "/kernels/" in str(p))
    assert f"skipped {kernels} (job bad run r1, 1 row per the lake's segments table)" in jobs
    assert "damaged" in outputs["jobs (lake)"][0]
    summary = json.loads(outputs["summary"][0])
    assert any(str(kernels) in note for note in summary["notes"])
    diff = json.loads(outputs["diff"][0])
    assert any(str(kernels) in note and note.startswith("test: ") for note in diff["notes"])


def _flip_a_page(path: Path) -> None:
    """Flip bytes of the first column's last data page (the footer stays whole): only
    reading that page finds it, through its checksum."""
    import pyarrow.parquet as pq

    column = pq.ParquetFile(path).metadata.row_group(0).column(0)
    start = column.dictionary_page_offset or column.data_page_offset
    at = start + column.total_compressed_size - 6  # the page's compressed values
    raw = bytearray(path.read_bytes())
    raw[at : at + 4] = bytes(b ^ 0xFF for b in raw[at : at + 4])
    path.write_bytes(bytes(raw))


def test_jobs_verify_finds_a_flipped_byte_its_cheap_check_cannot(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = Store(data, fsync=False)
    for job in ("good", "bad"):
        _stream(store, job, data)
    _run("compact", "--data-dir", str(data))
    kernels = sorted((data / "lake" / "kernels" / "job=bad").rglob("*.parquet"))[0]
    _flip_a_page(kernels)
    cheap, _ = _run("jobs", "--data-dir", str(data))
    assert "damaged" not in cheap  # size and footer are whole: not seen without reading
    for where in (str(data), data.as_uri()):
        out, err = _run("jobs", "--data-dir", where, "--verify")
        assert "Traceback" not in err
        bad = next(line for line in out.splitlines() if line.startswith("bad "))
        good = next(line for line in out.splitlines() if line.startswith("good "))
        assert "damaged" in bad and "damaged" not in good, out
        assert f"skipped {kernels} (job bad run r1" in out, out
