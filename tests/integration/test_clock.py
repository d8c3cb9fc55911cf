"""Hosts with wrong clocks: the merged timeline is aligned to the collector's clock."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tfprof.collector.store import Store

from .conftest import Collector, agent_cmd, clean_env, collector_cmd

SKEW_NS = 3_600 * 10**9  # this "host" is an hour ahead


def test_a_skewed_host_is_aligned_within_the_round_trip(
    traces: Path, tmp_path: Path, collector: Collector
) -> None:
    trace = traces / "kineto-hta" / "simple_add.json.gz"
    before = time.time_ns()
    run = subprocess.run(
        agent_cmd(
            "run", "--collector", collector.address, "--job", "skewed",
            "--source", f"replay:{trace}", "--replay-speed", "max", "--host-metrics-interval", "50",
            "--", sys.executable, "-c", "import time; time.sleep(0.5)",
        ),
        env=clean_env(TFPROF_TEST_CLOCK_SKEW_NS=str(SKEW_NS)),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    after = time.time_ns()
    assert run.returncode == 0, run.stderr

    (job,) = Store(collector.data_dir).load_jobs(["skewed"])
    stream = next(s for s in job.streams if s.num_records)
    raw_first = int(stream.records["start_ns"].min())
    # The records really carry the skewed clock ...
    assert raw_first - before > SKEW_NS // 2
    # ... and the offset the agent measured takes it out again.
    rtt = stream.clock_rtt_ns
    assert 0 <= rtt < 10**9
    assert abs(stream.record_shift_ns + SKEW_NS) <= rtt + 50 * 10**6

    out = tmp_path / "skewed.json"
    export = subprocess.run(
        collector_cmd("export", "--data-dir", str(collector.data_dir), "-o", str(out)),
        env=clean_env(), capture_output=True, timeout=120,
    )  # fmt: skip
    assert export.returncode == 0
    origin = json.loads(out.read_text())["otherData"]["origin_ns"]
    # The first replayed event happened (on the collector's clock) while the job ran.
    assert before - rtt <= origin <= after + rtt
    host = [s for s in job.streams if len(s.host_samples["time_ns"])]
    assert host, "no host samples"
    first_sample = int(host[0].host_samples["time_ns"].min()) + host[0].host_shift_ns
    assert before - rtt <= first_sample <= after + rtt
