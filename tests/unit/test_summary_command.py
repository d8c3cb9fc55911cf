"""``tfprof-collector summary`` and ``advise`` through ``main(argv)``: on a data dir, on
trace files, with filters, formats and bad arguments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.traces import shared_traces
from tfprof.collector.cli import main
from tfprof.collector.store import Store
from tfprof.core.version import PROTOCOL_VERSION
from tfprof.proto import collector_pb2 as pb

T0 = 1_700_000_000_000_000_000


def _store(tmp_path: Path) -> Path:
    store = Store(tmp_path / "data")
    for job, pid, names in (("alpha", 1, ["", "gemm"]), ("beta", 2, ["", "relu"])):
        hello = pb.Hello(protocol_version=PROTOCOL_VERSION, stream_secret=b"s" * 32,
                         job=job, run_id="r1", host="h", pid=pid,
                         task=str(pid), stream_id=f"s{pid}",
                         devices=[pb.Device(ordinal=0, uuid="GPU-shared")])  # fmt: skip
        writer = store.open_stream(hello)
        batch = pb.Batch(seq=1, string_base=1, strings=names[1:])
        rec = batch.records
        for i in range(4):
            rec.kind.append(pb.KERNEL)
            rec.start_ns.append(T0 + (2 * i + pid - 1) * 10_000)
            rec.duration_ns.append(10_000)
            rec.device.append(0)
            rec.stream.append(7)
            rec.name.append(1)
        writer.append(batch)
        writer.finish(pb.Goodbye(records_sent=4))
        writer.close()
    return tmp_path / "data"


def test_summary_views_on_a_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _store(tmp_path)
    assert main(["summary", "--data-dir", str(data), "--view", "gpus", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (gpu,) = doc["rows"]
    assert gpu["uuid"] == "GPU-shared" and gpu["busy_pct"] == 100.0
    assert {j["job"] for j in gpu["jobs"]} == {"alpha", "beta"}

    assert main(["summary", "--data-dir", str(data), "--job", "beta", "--view", "kernels",
                 "--format", "csv", "--select", "name,count,total_us"]) == 0  # fmt: skip
    assert capsys.readouterr().out.splitlines() == ["name,count,total_us", "relu,4,40.0"]

    assert main(["summary", "--data-dir", str(data), "--view", "jobs", "--since", "+20us",
                 "--until", "+50us", "--format", "json"]) == 0  # fmt: skip
    rows = {r["job"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["alpha"]["kernel_us"] == 20.0 and rows["beta"]["kernel_us"] == 10.0

    assert main(["advise", "--data-dir", str(data), "--format", "json"]) == 0
    rules = {f["rule"] for f in json.loads(capsys.readouterr().out)["findings"]}
    assert "time-slicing" in rules


def test_bad_arguments_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _store(tmp_path)
    assert main(["summary", "--data-dir", str(data), "--order-by", "nope"]) == 2
    assert "no field 'nope'" in capsys.readouterr().err
    assert main(["summary", "--data-dir", str(data), "--since", "tomorrow"]) == 2
    assert main(["summary"]) == 2
    assert "nothing to analyse" in capsys.readouterr().err
    # A name that names nothing is the user's to fix, like any bad argument.
    assert main(["summary", str(tmp_path / "missing.json")]) == 2
    assert "no such trace file" in capsys.readouterr().err


def test_summary_and_advise_on_a_trace_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = shared_traces() / "kineto-hta" / "simple_add.json.gz"
    if not trace.is_file():
        pytest.skip(f"{trace} not found")
    out = tmp_path / "k.json"
    assert main(["summary", str(trace), "--view", "kernels", "--top", "3", "--format", "json",
                 "-o", str(out)]) == 0  # fmt: skip
    rows = json.loads(out.read_text())["rows"]
    assert next(r["name"] for r in rows) == "ampere_sgemm_32x32_sliced1x4_tn"
    assert len(rows) == 3
    assert main(["advise", str(trace), "--rule", "pageable-memory"]) == 0
    assert "[pageable-memory]" in capsys.readouterr().out


def test_summary_reads_back_our_own_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _store(tmp_path)
    exported = tmp_path / "merged.json.gz"
    assert main(["export", "--data-dir", str(data), "-o", str(exported)]) == 0
    capsys.readouterr()
    assert main(["summary", str(exported), "--view", "kernels", "--format", "json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert (rows["gemm"]["count"], rows["relu"]["count"]) == (4, 4)
    assert rows["gemm"]["total_us"] == 40.0
