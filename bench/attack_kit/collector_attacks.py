"""Attacks of any network client on the collector's gRPC port (no token by default)."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc

from bench.attack_kit.clients import (
    hello,
    kernels_batch,
    launcher_counts,
    launcher_job,
    legit_launcher,
    serve_flags,
    stream,
    wait_for,
)
from bench.attack_kit.host import oom_kills, peak_mb, remove_cgroup
from bench.attack_kit.kit import Service, Setup, memory_limited, run_figures, start_collector
from bench.attack_kit.result import Result
from tfprof.proto import collector_pb2 as pb
from tfprof.proto import collector_pb2_grpc as pbg

# -- a batch that decodes to more than the collector's memory ---------------------------

FLAGS = ("--max-inflight-bytes", "64M")


def _wait_compacted(collector: Service, data: Path, timeout: float) -> bool:
    """Until every stream that stored a batch has it in the lake (its watermark at the
    end of its log, nothing pending), or the collector died; False when none stored any."""
    deadline = time.monotonic() + timeout
    while collector.proc.poll() is None and time.monotonic() < deadline:
        logs = [p for p in data.glob("jobs/*/*/*/batches.log") if p.stat().st_size > 8]
        if not logs:
            return False  # nothing was stored: nothing to compact
        marks = [p.parent / "lake.json" for p in logs]
        if all(m.exists() for m in marks) and all(
            json.loads(m.read_text()).get("pending") is None
            and json.loads(m.read_text()).get("log_offset") == log.stat().st_size
            for m, log in zip(marks, logs, strict=True)
        ):
            return True
        time.sleep(0.3)
    time.sleep(0.5)
    return False


def big_batch(setup: Setup, records: int = 1_200_000, limit_mb: int = 640) -> Result:
    r = Result(
        "big batch to a memory-limited collector",
        f"a network client sends one batch of {records:,} kernels (kind, start, duration "
        f"only) to a collector in a {limit_mb} MiB memory cgroup, then the collector is "
        "restarted on the same data dir under the same limit",
    )
    if setup.memory_cgroup is None:
        r.error = "no writable memory cgroup on this machine"
        return r
    data = setup.folder("bigbatch/data")
    group, enter = memory_limited(setup, "bigbatch", limit_mb << 20)
    try:
        collector = start_collector(setup, data, *FLAGS, preexec=enter)
        idle = collector.stats()
        r.add(f"collector idle: {idle}; cgroup peak so far {peak_mb(group):.0f} MB")
        message = kernels_batch(1, records)
        size = message.ByteSize()
        r.add(
            f"the batch is {size / 1e6:.1f} MB on the wire; collector flags "
            f"{' '.join(FLAGS)} (a tenth of its memory), --max-message-bytes 64 MiB"
        )
        bye = pb.AgentMessage(goodbye=pb.Goodbye(records_sent=records))
        acks, status = stream(
            collector.address, [hello("bigbatch", "run1", uuid.uuid4().hex), message, bye]
        )
        r.add(f"client: acks {acks}, call ended {status}")
        compacted = _wait_compacted(collector, data, 30)
        alive = collector.proc.poll() is None
        r.add(f"compacted into the lake: {'yes' if compacted else 'no'}")
        state = (
            f"alive, {collector.stats()}" if alive else f"DEAD (exit {collector.proc.returncode})"
        )
        r.add(f"collector after the batch: {state}; cgroup peak {peak_mb(group):.0f} MB, "
              f"OOM kills {oom_kills(group)}")  # fmt: skip
        collector.stop(20)
        restarts = []
        for attempt in range(2):
            again = start_collector(setup, data, *FLAGS, preexec=enter)
            if attempt == 0:
                legit = legit_launcher(setup, again.address, data, "legit-bigbatch", wait_s=15)
                r.add(f"legit job sent to the restarted collector: {legit}")
            done = _wait_compacted(again, data, 25)
            restarts.append(("alive, compacted what it stored" if done else "alive, none compacted")
                            if again.proc.poll() is None
                            else f"died (exit {again.proc.returncode})")  # fmt: skip
            again.stop(20)
        r.add(f"restarts on the same data dir: {', '.join(restarts)}; OOM kills in all "
              f"{oom_kills(group)}")  # fmt: skip
        under = _under_the_limit(setup, data, enter, group, r)
        quarantined = any("quarantin" in ln for ln in collector.lines)
        r.held = (alive and all(s.startswith("alive") for s in restarts) and under
                  and oom_kills(group) == 0)  # fmt: skip
        if quarantined:
            r.add("the collector quarantined the batch")
    finally:
        remove_cgroup(group)
    return r


UNDER_RECORDS = 260_000  # decodes to 62 MB, just under the 64M limit of FLAGS


def _under_the_limit(
    setup: Setup, data: Path, enter: Callable[[], None], group: Path, r: Result
) -> bool:
    """A batch just under the decoded-size limit is stored, and compacted (a chunk at a
    time) inside the same memory limit; True when it was."""
    collector = start_collector(setup, data, *FLAGS, preexec=enter)
    try:
        bye = pb.AgentMessage(goodbye=pb.Goodbye(records_sent=UNDER_RECORDS))
        message = kernels_batch(1, UNDER_RECORDS)
        first = hello("underlimit", "run1", uuid.uuid4().hex)
        acks, status = stream(collector.address, [first, message, bye])
        deadline = time.monotonic() + 60
        stored = 0
        while time.monotonic() < deadline and collector.proc.poll() is None:
            stored = run_figures(data, "underlimit").records
            if stored >= UNDER_RECORDS and _lake_rows(data, "underlimit") >= UNDER_RECORDS:
                break
            time.sleep(0.5)
        in_lake = _lake_rows(data, "underlimit")
        alive = collector.proc.poll() is None
        r.add(f"a batch of {UNDER_RECORDS:,} records ({message.ByteSize() / 1e6:.1f} MB on the "
              f"wire, {UNDER_RECORDS * 240 / 1e6:.0f} MB decoded): acks {acks}, {status}; "
              f"stored {stored:,}, in the lake {in_lake:,}; collector "
              f"{'alive' if alive else 'DEAD'}; cgroup peak {peak_mb(group):.0f} MB")  # fmt: skip
        return alive and acks[-1:] == [1] and in_lake == UNDER_RECORDS
    finally:
        collector.stop(20)


def _lake_rows(data: Path, job: str) -> int:
    import pyarrow.parquet as pq

    rows = 0
    for path in (data / "lake" / "kernels").glob(f"job={job}/*/*.parquet"):
        try:
            rows += pq.ParquetFile(path).metadata.num_rows
        except Exception:
            continue
    return rows


# -- a stream id taken from a capture reply ---------------------------------------------

SEQ_JUMP = 9 * 10**18


def stream_hijack(setup: Setup) -> Result:
    r = Result(
        "stream-id hijack with a huge seq",
        "a victim job streams to the collector (no token, the default); a network client "
        "asks StartCapture --all for the victim's job, run and stream id, says hello with "
        f"that stream id (or one learnt out of band) and sends one empty batch with seq "
        f"{SEQ_JUMP:.0e}",
    )
    data = setup.folder("hijack/data")
    collector = start_collector(setup, data)
    try:
        r.add(f"collector before: {collector.stats()}")
        repeat, speed = 8, 0.2
        span = repeat * 0.139 / speed  # the trace spans 0.139 s
        victim = launcher_job(setup, collector.address, "victim", str(speed), repeat,
                               code=f"import time; time.sleep({span + 1.5:.1f})")  # fmt: skip
        sent = setup.records_per_replay * repeat

        def stored() -> bool:
            return any(p.stat().st_size > 0 for p in data.glob("jobs/victim/*/*/batches.log"))

        if not wait_for(stored, 30):
            r.error = "the victim stored nothing within 30 s"
            return r
        with grpc.insecure_channel(collector.address) as channel:
            stub = pbg.CollectorStub(channel)
            try:
                reply = stub.StartCapture(pb.CaptureRequest(all=True, duration_ns=10**6),
                                          timeout=10)  # fmt: skip
                named = [s for s in reply.capture.streams if s.job == "victim"]
                leaked = [getattr(s, "stream_id", "") for s in named]
                leaked = [x for x in leaked if x]
                r.add(f"StartCapture --all without a token: OK, {len(reply.capture.streams)} "
                      f"stream(s) named, victim's stream id "
                      f"{'leaked' if leaked else 'not shown'}")  # fmt: skip
            except grpc.RpcError as exc:
                leaked = []
                r.add(f"StartCapture --all without a token: refused "
                      f"({exc.code().name})")  # fmt: skip
        # Even a stream id learnt some other way (here: read from the data dir as root)
        # must not let a client speak for the stream.
        victim_dirs = sorted(data.glob("jobs/victim/*/*/hello.pb"))
        run_id, stream_id = (victim_dirs[0].parent.parent.name, victim_dirs[0].parent.name) \
            if victim_dirs else ("", "")  # fmt: skip
        hijack_refused = True
        if leaked or stream_id:
            target = stream_id or leaked[0]
            how = "from the reply" if leaked else "read from the data dir"
            jump = pb.AgentMessage(batch=pb.Batch(seq=SEQ_JUMP))
            acks, status = stream(collector.address,
                                  [hello("victim", run_id, target), jump],
                                  timeout=15)  # fmt: skip
            r.add(f"hijacking hello with the victim's stream id ({how}) + seq-jump batch: "
                  f"acks {acks}, call ended {status}")  # fmt: skip
            hijack_refused = SEQ_JUMP not in acks and status != "OK"
            # The bounded step, on a stream of the client's own.
            own = uuid.uuid4().hex
            acks, status = stream(collector.address,
                                  [hello("attacker", "run1", own), jump], timeout=15)  # fmt: skip
            r.add(f"seq jump on a stream of the client's own: acks {acks}, call ended {status}")
        else:
            r.add("no stream id to hijack")
        try:
            _, err = victim.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            victim.kill()
            _, err = victim.communicate()
        counts = launcher_counts(err)
        time.sleep(1.0)
        figures = run_figures(data, "victim")
        said = (f"{counts[0]:,} delivered, {counts[1]:,} spooled, {counts[2]:,} dropped"
                if counts else "no closing line")  # fmt: skip
        r.add(
            f"victim launcher said: {said}; its goodbye says the hook sent "
            f"{_records_sent(data, 'victim'):,}"
        )
        r.add(
            f"victim replayed {sent:,}; collector stored {figures.records:,}, counted dropped "
            f"{figures.dropped:,}; lost uncounted {sent - figures.records - figures.dropped:,}"
        )
        r.add(f"collector after: {collector.stats()}")
        r.held = not leaked and hijack_refused and figures.records + figures.dropped == sent
    finally:
        collector.stop(20)
    return r


def _records_sent(data: Path, job: str) -> int:
    return sum(pb.Goodbye.FromString(p.read_bytes()).records_sent
               for p in data.glob(f"jobs/{job}/*/*/goodbye.pb"))  # fmt: skip


# -- stream directories and log lines that hellos leave ---------------------------------


def hello_litter(setup: Setup, hellos: int = 1000, silent: int = 50) -> Result:
    r = Result(
        "hellos leave stream directories; silent streams each log a line",
        f"a network client opens {hellos:,} streams that say hello and hang up, and "
        f"{silent} that never say hello (collector --hello-timeout 1)",
    )
    import concurrent.futures

    data = setup.folder("litter/data")
    flags = ["--hello-timeout", "1"]
    grace = "--empty-stream-grace" in serve_flags(setup)
    if grace:
        flags += ["--empty-stream-grace", "2"]
    collector = start_collector(setup, data, *flags)
    try:
        before = collector.stats()
        with grpc.insecure_channel(collector.address) as channel:
            stub = pbg.CollectorStub(channel)

            def one(i: int) -> str:
                try:
                    for _ in stub.Stream(iter([hello("litter", f"run{i % 10}", uuid.uuid4().hex)]),
                                         timeout=20):  # fmt: skip
                        pass
                    return "OK"
                except grpc.RpcError as exc:
                    return exc.code().name

            def quiet(_call: int) -> str:
                try:
                    for _ in stub.Stream(_never(), timeout=10):
                        pass
                    return "OK"
                except grpc.RpcError as exc:
                    return exc.code().name

            start = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(16) as pool:
                flood = pool.map(one, range(hellos))
                time.sleep(1.0)
                legit = legit_launcher(setup, collector.address, data, "legit-litter")
                outcomes = list(flood)
            took = time.monotonic() - start
            with concurrent.futures.ThreadPoolExecutor(silent) as pool:
                quiet_outcomes = list(pool.map(quiet, range(silent)))
        r.add(f"{outcomes.count('OK'):,} hellos accepted of {hellos:,} in {took:.1f} s")
        r.add(f"legit job during the hellos: {legit}")
        r.add(f"silent streams ended: {sorted(set(quiet_outcomes))}")
        time.sleep(4.0 if grace else 1.0)
        dirs, files, size = _tree(data / "jobs" / "litter")
        r.add(f"collector while holding them: {collector.stats()}")
        r.add(
            f"left in the data dir{' after the grace' if grace else ''}: {dirs:,} directories, "
            f"{files:,} files, {size / 1e6:.1f} MB (for streams that stored no record)"
        )
        lines = [ln for ln in collector.lines if "rejected call" in ln or "hello" in ln.lower()]
        per_stream = [ln for ln in lines if "no hello within" in ln]
        r.add(f"collector log: {len(per_stream)} lines for {silent} silent streams, "
              f"{len(collector.lines):,} lines in all")  # fmt: skip
        r.add(f"collector: {before} before, {collector.stats()} after")
        r.held = dirs <= 3 and len(per_stream) <= 2
    finally:
        collector.stop(20)
    return r


def _never() -> Iterator[pb.AgentMessage]:
    time.sleep(3)
    return
    yield


def _tree(root: Path) -> tuple[int, int, int]:
    dirs = files = size = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirs += len(dirnames)
        for name in filenames:
            files += 1
            try:
                size += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                pass
    return dirs, files, size


# -- an open port ------------------------------------------------------------------------


def open_listener(setup: Setup) -> Result:
    r = Result(
        "collector on a non-loopback address without a token",
        "serve --listen 0.0.0.0:0 with no --auth-token-file and no TLS; then a client "
        "without a token streams a hello and a batch to it",
    )
    data = setup.folder("listener/data")
    try:
        collector = start_collector(setup, data, listen="0.0.0.0:0", timeout=20)
    except RuntimeError as exc:
        refusal = str(exc).splitlines()[1:3]
        r.add(f"serve refused to start: {' '.join(refusal)}")
        r.held = True
        return r
    try:
        said = [ln.strip() for ln in collector.lines if "auth" in ln or "insecure" in ln]
        r.add(f"serve started on {collector.address}: {said[0] if said else ''}")
        port = collector.address.rsplit(":", 1)[1]
        acks, status = stream(f"127.0.0.1:{port}", [hello("open", "run1", uuid.uuid4().hex),
                                                   kernels_batch(1, 10)])  # fmt: skip
        r.add(f"a client without a token: acks {acks}, call ended {status}")
        r.held = False
    finally:
        collector.stop(20)
    return r
