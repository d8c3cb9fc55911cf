"""Fault injection with real processes: every record is stored once or counted as dropped.

Four cases, each a real ``tfprof-agent run`` replaying a recorded GPU trace into a real
collector (``tfprof-collector serve`` on 127.0.0.1:0), with one fault injected:

    spool-full       the collector is down for the whole job and the spool sits on a
                     small tmpfs (needs root to mount; skipped otherwise); then the
                     collector starts and ``flush-spool`` delivers what was kept
    launcher-kill    the launcher is SIGKILLed mid-stream; the job runs on
    poisoned-hello   a stream whose clock pair overflows int64 is put in the data dir
                     beside a good run (as an older collector accepted it)
    corrupted-log    bytes in the middle of a finished stream's batches.log are flipped

Per case it prints records sent, stored (what ``export`` writes), counted as dropped
or lost (the store's drop counts, ``jobs``' records lost in skipped parts, the hook's
count on stderr) and whether sent = stored + counted holds. For launcher-kill, records
the launcher had received but not delivered die with it: the hook says how many it
handed over, so that share is shown apart (handed - stored), never hidden.

Run from the repository root:

    .venv/bin/python bench/fault_injection.py [--repeat 1000] [--trace PATH]

Cleans up its temporary directory, its mount and every process it started.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tfprof.core.version import PROTOCOL_VERSION

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = REPO / "tests/data/traces/tf-timeline-ikhlestov/GPU_timeline_03_merged_5_runs.json"
LISTENING = re.compile(r"listening on (\S+)")
ENV = {k: v for k, v in os.environ.items() if not k.startswith("TFPROF_")}


@dataclass
class Outcome:
    case: str
    sent: int
    stored: int
    counted: int
    note: str = ""

    def row(self) -> str:
        holds = "yes" if self.sent == self.stored + self.counted else "NO"
        return (f"{self.case:<15} {self.sent:>10,} {self.stored:>10,} {self.counted:>10,}  "
                f"{holds:<5} {self.note}")  # fmt: skip


def py(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


@contextlib.contextmanager
def collector(data: Path, listen: str = "127.0.0.1:0") -> Iterator[str]:
    proc = subprocess.Popen(
        py("tfprof.collector.cli", "--log-level", "ERROR", "serve", "--listen", listen,
           "--data-dir", str(data)),
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=ENV,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            match = LISTENING.search(line)
            if match:
                yield match.group(1)
                break
        else:
            raise RuntimeError("the collector did not start")
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def run_job(trace: Path, repeat: int, address: str, job: str, spool: Path, speed: str,
            code: str = "print('job done')", **popen: object) -> subprocess.Popen[str]:  # fmt: skip
    cmd = py(
        "tfprof.agent.cli", "run", "--collector", address, "--job", job,
        "--source", f"replay:{trace}", "--replay-speed", speed,
        "--replay-repeat", str(repeat), "--host-metrics-interval", "0",
        "--spool-dir", str(spool), "--exit-timeout", "120",
        "--", sys.executable, "-c", code,
    )  # fmt: skip
    proc: subprocess.Popen[str] = subprocess.Popen(  # type: ignore[call-overload]
        cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen
    )
    return proc


def exported(data: Path, out: Path) -> tuple[int, dict[str, object]]:
    """Records ``export`` writes, and its metadata (what it says it skipped)."""
    cmd = py("tfprof.collector.cli", "--log-level", "ERROR", "export", "--data-dir", str(data),
             "-o", str(out))  # fmt: skip
    subprocess.run(cmd, env=ENV, check=True, capture_output=True)
    doc = json.loads(out.read_text())
    meta = doc["otherData"]
    records = sum(j["records"]["total"] for j in meta["jobs"])
    return records, meta


def dropped(meta: dict[str, object]) -> int:
    counts = meta["dropped"]
    assert isinstance(counts, dict)
    return int(counts["total"])


def lost_in_jobs(data: Path) -> tuple[int, str]:
    """Records ``jobs`` says were lost in skipped parts, and its notes."""
    cmd = py("tfprof.collector.cli", "--log-level", "ERROR", "jobs", "--data-dir", str(data))
    out = subprocess.run(cmd, env=ENV, capture_output=True, text=True, check=True)
    lost = sum(int(m.replace(",", "")) for m in
               re.findall(r"records lost in skipped parts: ([\d,]+)", out.stdout))  # fmt: skip
    return lost, " | ".join(out.stdout.partition("\n\n")[2].strip().splitlines())


def free_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def trace_records(trace: Path) -> int:
    from tfprof.readers import load_trace

    return len(load_trace(trace))


# -- the cases ----------------------------------------------------------------------------


def spool_full(tmp: Path, trace: Path, repeat: int) -> Outcome:
    mnt = tmp / "small"
    mnt.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tfprof-bench", str(mnt)],
                           capture_output=True, text=True, check=False)  # fmt: skip
    if mount.returncode != 0:
        return Outcome("spool-full", 0, 0, 0, f"skipped: {mount.stderr.strip()}")
    try:
        address = free_address()
        job = run_job(trace, repeat, address, "spoolfull", mnt / "spool", "max")
        _, err = job.communicate(timeout=600)
        said = re.search(r"([\d,]+) records of \d+ process\(es\) not delivered", err)
        data = tmp / "spool-data"
        with collector(data, address):
            subprocess.run(py("tfprof.agent.cli", "flush-spool", "--spool-dir", str(mnt / "spool")),
                           env=ENV, capture_output=True, check=True, timeout=600)  # fmt: skip
        stored, meta = exported(data, tmp / "spool.json")
        waiting = said.group(1) if said else "none"
        return Outcome("spool-full", trace_records(trace) * repeat, stored, dropped(meta),
                       f"end-of-run line said {waiting} wait; tmpfs 1 MiB")  # fmt: skip
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def launcher_kill(tmp: Path, trace: Path, repeat: int) -> Outcome:
    data = tmp / "kill-data"
    with collector(data) as address:
        job = run_job(trace, repeat, address, "killed", tmp / "kill-spool", "5",
                      code="import time; time.sleep(4); print('job done')",
                      start_new_session=True)  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while not any(data.glob("jobs/*/*/*/batches.log")) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)
            job.send_signal(signal.SIGKILL)
            out, err = job.communicate(timeout=300)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job.pid, signal.SIGKILL)
    counted = re.search(r"([\d,]+) GPU records of this process were not delivered.*after "
                        r"([\d,]+) were handed", err)  # fmt: skip
    if counted is None:
        return Outcome("launcher-kill", 0, 0, 0, f"no count on stderr: {err.strip()[-300:]}")
    lost, handed = (int(g.replace(",", "")) for g in counted.groups())
    stored, meta = exported(data, tmp / "kill.json")
    died = handed - stored
    _, notes = lost_in_jobs(data)
    return Outcome("launcher-kill", handed + lost, stored, lost + dropped(meta) + died,
                   f"job output {out.strip()!r}; {died:,} of the counted died in the launcher "
                   f"(handed - stored); jobs: {notes}")  # fmt: skip


def good_run(tmp: Path, trace: Path, repeat: int, name: str) -> Path:
    data = tmp / f"{name}-data"
    with collector(data) as address:
        job = run_job(trace, repeat, address, name, tmp / f"{name}-spool", "max")
        job.communicate(timeout=600)
    return data


def poisoned_hello(tmp: Path, trace: Path, repeat: int) -> Outcome:
    from tfprof.core import batchlog
    from tfprof.proto import collector_pb2 as pb

    data = good_run(tmp, trace, repeat, "good")
    stream = data / "jobs" / "poisoned" / "run1" / "s1"
    stream.mkdir(parents=True)
    hello = pb.Hello(protocol_version=PROTOCOL_VERSION, stream_secret=b"s" * 32,
                     job="poisoned", run_id="run1", stream_id="s1",
                     host="node-a", pid=1, task="0")  # fmt: skip
    hello.clock.realtime_ns, hello.clock.tracer_ns = 7258118400000000000, -7258118400000000000
    (stream / "hello.pb").write_bytes(hello.SerializeToString())
    batch = pb.Batch(seq=1)
    batch.records.kind.extend([pb.KERNEL] * 100)
    batch.records.start_ns.extend(range(100))
    (stream / "batches.log").write_bytes(
        batchlog.MAGIC + batchlog.encode(batch.SerializeToString())
    )
    stored, meta = exported(data, tmp / "poisoned.json")
    lost, notes = lost_in_jobs(data)
    sent = trace_records(trace) * repeat + 100
    return Outcome("poisoned-hello", sent, stored, dropped(meta) + lost, f"jobs: {notes}")


def corrupted_log(tmp: Path, trace: Path, repeat: int) -> Outcome:
    data = good_run(tmp, trace, repeat, "corrupt")
    (log,) = data.glob("jobs/corrupt/*/*/batches.log")
    raw = bytearray(log.read_bytes())
    for at in (len(raw) // 3, len(raw) // 2):  # a length prefix's worth, twice
        raw[at : at + 4] = b"\xff\xff\xff\x7f"
    log.write_bytes(bytes(raw))
    stored, meta = exported(data, tmp / "corrupt.json")
    lost, notes = lost_in_jobs(data)
    return Outcome("corrupted-log", trace_records(trace) * repeat, stored, dropped(meta) + lost,
                   f"jobs: {notes}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=1000, help="replay loops per job")
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    args = parser.parse_args()
    print(f"{'CASE':<15} {'SENT':>10} {'STORED':>10} {'COUNTED':>10}  HOLDS NOTE")
    with tempfile.TemporaryDirectory(prefix="tfprof-faults-") as d:
        for case in (spool_full, launcher_kill, poisoned_hello, corrupted_log):
            tmp = Path(d) / case.__name__
            tmp.mkdir()
            print(case(tmp, args.trace, args.repeat).row(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
