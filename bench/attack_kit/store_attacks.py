"""Attacks on what tfprof leaves on disk and on its read commands: file modes and stored
secrets, a damaged Parquet segment, `sql` reaching outside the lake, run states."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from bench.attack_kit.clients import (
    hello,
    kernels_batch,
    launcher_job,
    serve_flags,
    stream,
    wait_for,
)
from bench.attack_kit.kit import (
    Setup,
    attacker,
    node_env,
    read_line,
    run_figures,
    start_collector,
    start_daemon,
    traced_as,
)
from bench.attack_kit.result import Result

SECRET = "SECRET123"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _modes(root: Path) -> str:
    """Distinct modes of the directories and files under ``root``."""
    dirs: set[str] = set()
    files: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirs.update(stat.filemode(os.lstat(os.path.join(dirpath, d)).st_mode) for d in dirnames)
        files.update(stat.filemode(os.lstat(os.path.join(dirpath, f)).st_mode) for f in filenames)
    return f"directories {sorted(dirs)}, files {sorted(files)}"


def _snoop(setup: Setup, root: Path) -> dict[str, object]:
    atk = attacker(setup, "snoop", SECRET, str(root))
    line = read_line(atk, 30)
    atk.wait(10)
    return json.loads(line) if line else {"files": 0, "readable": 0, "with_secret": 0}


def readable_files(setup: Setup) -> Result:
    r = Result(
        "world-readable spool and data dir, argv secrets stored",
        f"user {setup.victim.name} runs `python3 -c ... --api-key={SECRET}` through the node "
        "daemon while the collector is down (the daemon spools), then with it up (the "
        f"collector stores); user {setup.attacker.name} reads what it can of both",
    )
    node, data = setup.folder("files/node"), setup.folder("files/data")
    port = _free_port()
    address = f"127.0.0.1:{port}"
    daemon = start_daemon(setup, address, node, TFPROF_DELIVERY_TIMEOUT="2")
    sock = node / "agent.sock"
    try:
        env = node_env(setup, sock, "secrets", TFPROF_REPLAY_REPEAT="1")
        job = traced_as(setup, setup.victim, env, "import time; time.sleep(1)",
                        f"--api-key={SECRET}")  # fmt: skip
        job.communicate(timeout=60)
    finally:
        daemon.stop(30)
    spool = node / "spool"
    seen = _snoop(setup, spool)
    r.add(f"spool {spool}: {_modes(spool)}")
    r.add(f"attacker read {seen['readable']} of {seen['files']} spool files; "
          f"{seen['with_secret']} hold {SECRET} (e.g. {(seen.get('where') or ['-'])[0]})")  # type: ignore[index]  # fmt: skip
    collector = start_collector(setup, data, listen=address)
    daemon = start_daemon(setup, address, node)
    try:
        wait_for(lambda: run_figures(data, "secrets").records > 0, 30)
    finally:
        daemon.stop(30)
        collector.stop(30)
    stored = _snoop(setup, data)
    r.add(f"data dir {data}: {_modes(data)}")
    r.add(f"attacker read {stored['readable']} of {stored['files']} data-dir files; "
          f"{stored['with_secret']} hold {SECRET}")  # fmt: skip
    hellos = [p.read_bytes() for p in data.glob("jobs/*/*/*/hello.pb")]
    kept = sum(SECRET.encode() in h for h in hellos)
    masked = sum(b"--api-key=***" in h for h in hellos)
    r.add(f"stored hellos (as root sees them): {len(hellos)}; with the secret unredacted: "
          f"{kept}; with --api-key=***: {masked}")  # fmt: skip
    files = sum(len(f) for root in (spool, data) for _, _, f in os.walk(root))
    r.add(f"files there (as root counts them): {files}")
    r.held = (seen["readable"] == 0 and stored["readable"] == 0 and kept == 0
              and len(hellos) > 0)  # fmt: skip
    return r


# -- one damaged segment -----------------------------------------------------------------


def _cli(setup: Setup, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(setup.collector(*args), env=setup.env(), capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


def _two_jobs(setup: Setup, data: Path) -> None:
    """Jobs `good` and `bad`, stored, finished and compacted into data/lake."""
    collector = start_collector(setup, data, "--compact-interval", "0")
    try:
        for name in ("good", "bad"):
            job = launcher_job(setup, collector.address, name, "max", 4)
            job.communicate(timeout=60)
    finally:
        collector.stop(30)  # a stop compacts every finished stream


def _flip_start_ns(path: Path) -> int:
    """Invert 64 bytes inside the first page of the segment's start_ns column (a flip in
    a column no command reads would show nothing)."""
    import pyarrow.parquet as pq

    group = pq.ParquetFile(path).metadata.row_group(0)
    chunk = next(group.column(i) for i in range(group.num_columns)
                 if group.column(i).path_in_schema == "start_ns")  # fmt: skip
    offset = (chunk.dictionary_page_offset or chunk.data_page_offset) + 24
    raw = bytearray(path.read_bytes())
    raw[offset : offset + 64] = bytes(b ^ 0xFF for b in raw[offset : offset + 64])
    path.write_bytes(bytes(raw))
    return int(offset)


def damaged_segment(setup: Setup) -> Result:
    r = Result(
        "one damaged Parquet segment",
        "two jobs stored and compacted; 64 bytes flipped in job bad's kernels segment (in "
        "its start_ns column); then jobs, summary, advise, export and sql over all jobs",
    )
    data = setup.folder("damaged/data")
    _two_jobs(setup, data)
    segments = sorted((data / "lake" / "kernels").glob("job=bad/*/*.parquet"))
    if not segments:
        r.error = "no kernels segment of job bad was published"
        return r
    target = segments[0]
    offset = _flip_start_ns(target)
    r.add(
        f"damaged {target.relative_to(data)}: 64 bytes at offset {offset} (the first page "
        "of its start_ns column, which every reader needs)"
    )
    out = setup.folder("damaged/out")
    verify = ["--verify"] if "--verify" in serve_flags(setup, "jobs") else []
    commands = {
        # A listing reads sizes and footers, not pages: a flipped byte inside a page is
        # found by the deep check (every page against its checksum), asked for here.
        "jobs (data dir)": ("jobs", "--data-dir", str(data), *verify),
        "jobs (lake)": ("jobs", "--data-dir", str(data / "lake"), *verify),
        "summary": ("summary", "--data-dir", str(data)),
        "advise": ("advise", "--data-dir", str(data)),
        "export": ("export", "--data-dir", str(data), "-o", str(out / "all.json.gz")),
        "sql": ("sql", "SELECT job, count(*) AS n, min(start_ns) AS first FROM kernels "
                "GROUP BY job", "--data-dir", str(data)),
    }  # fmt: skip
    held = True
    for what, argv in commands.items():
        done = _cli(setup, *argv)
        err = [ln for ln in done.stderr.splitlines() if ln.strip()]
        names_file = target.name in done.stderr + done.stdout  # jobs: notes under its table
        good_shown = "good" in done.stdout or (what == "export" and done.returncode == 0)
        last = err[-1][:150] if err else ""
        traceback = any(ln.startswith("Traceback") for ln in err)
        r.add(f"{what}: exit {done.returncode}, job good shown: {'yes' if good_shown else 'no'}, "
              f"damaged file named: {'yes' if names_file else 'no'}, stderr {len(err)} lines"
              + (" with a traceback" if traceback else "")
              + (f" (last: {last})" if last else ""))  # fmt: skip
        held = held and done.returncode == 0 and good_shown and names_file
    r.held = held
    return r


# -- sql outside the lake -----------------------------------------------------------------


def sql_escape(setup: Setup) -> Result:
    r = Result(
        "sql reaches outside the lake",
        "tfprof-collector sql over a data dir: read_csv('/etc/shadow'), COPY ... TO a file, "
        "ATTACH a new database file, INSTALL httpfs (HOME is a scratch folder)",
    )
    data = setup.folder("sql/data")
    collector = start_collector(setup, data, "--compact-interval", "0")
    try:
        launcher_job(setup, collector.address, "one", "max", 1).communicate(timeout=60)
    finally:
        collector.stop(30)
    out = setup.folder("sql/out")
    copied, attached = out / "copied.csv", out / "attached.duckdb"
    queries = {
        "read /etc/shadow": ("SELECT count(*) AS lines FROM read_csv('/etc/shadow', "
                             "header=false, sep='\\t', columns={'line': 'VARCHAR'})"),
        "COPY TO a file": f"COPY (SELECT 42 AS x) TO '{copied}'",
        "ATTACH a database": f"ATTACH '{attached}' AS other",
        "INSTALL httpfs": "INSTALL httpfs",
    }  # fmt: skip
    refused = 0
    for what, query in queries.items():
        done = _cli(setup, "sql", query, "--data-dir", str(data), "--format", "csv",
                    timeout=90)  # fmt: skip
        err = " ".join(ln.strip() for ln in done.stderr.splitlines() if ln.strip())[:200]
        effect = ""
        if what.startswith("read"):
            lines = done.stdout.strip().splitlines()
            effect = f"; rows read: {lines[1] if len(lines) > 1 else 0}"
        elif what.startswith("COPY"):
            effect = f"; file written: {'yes' if copied.exists() else 'no'}"
        elif what.startswith("ATTACH"):
            effect = f"; file created: {'yes' if attached.exists() else 'no'}"
        r.add(f"{what}: exit {done.returncode}{effect}" + (f" ({err})" if err else ""))
        names_setting = "external" in done.stderr or "lock" in done.stderr
        if done.returncode == 2 and names_setting:
            refused += 1
    r.held = refused == len(queries) and not copied.exists() and not attached.exists()
    return r


# -- run states ----------------------------------------------------------------------------


def _states(data: Path, job: str, timeout: float = 8) -> str:
    """The job's runs as `jobs` shows them, once no stream of it is held open (or after
    ``timeout``: then as they are)."""
    wait_for(lambda: "streaming" not in run_figures(data, job).states, timeout)
    figures = run_figures(data, job)
    reasons = "; ".join(figures.reasons)
    return f"{', '.join(figures.states) or 'no run'}" + (f" ({reasons})" if reasons else "")


FORKS = 200
FORK_CODE = f"""
import os
pids = []
for i in range({FORKS}):
    pid = os.fork()
    if pid == 0:
        sum(range(1000))
        os._exit(0)
    pids.append(pid)
for pid in pids:
    os.waitpid(pid, 0)
print('forked {FORKS}')
"""


def run_states(setup: Setup) -> Result:
    r = Result(
        "healthy runs reported as lost",
        "a launcher sent SIGTERM (as schedulers end jobs) after its records were stored; a "
        f"daemon-traced job sent SIGTERM; a job forking {FORKS} children that end with "
        "os._exit; a reconnect that finishes a stream while its old call is still open",
    )
    data, node = setup.folder("states/data"), setup.folder("states/node")
    collector = start_collector(setup, data)
    ok = True
    try:
        # 1. the launcher ended by SIGTERM
        job = launcher_job(setup, collector.address, "term", "max", 2,
                            code="import time; time.sleep(60)")  # fmt: skip
        sent = setup.records_per_replay * 2
        wait_for(lambda: run_figures(data, "term").records >= sent, 30)
        job.send_signal(signal.SIGTERM)
        _, err = job.communicate(timeout=60)
        closing = [ln.strip() for ln in err.splitlines() if "records delivered" in ln]
        state = _states(data, "term")
        r.add(f"launcher SIGTERM'd (exit {job.returncode}, said: "
              f"{closing[0] if closing else '-'}): jobs says {state}")  # fmt: skip
        ok = ok and state.startswith("finished")
        # 2. a daemon-traced job ended by SIGTERM
        daemon = start_daemon(setup, collector.address, node)
        try:
            env = node_env(setup, node / "agent.sock", "dterm", TFPROF_REPLAY_REPEAT="2")
            proc = traced_as(setup, setup.victim, env, "import time; time.sleep(60)")
            wait_for(lambda: run_figures(data, "dterm").records >= sent, 30)
            os.killpg(proc.pid, signal.SIGTERM)
            proc.communicate(timeout=30)
            time.sleep(1.0)
            state = _states(data, "dterm")
            r.add(f"daemon-traced job SIGTERM'd: jobs says {state}")
            ok = ok and state.startswith("finished")
        finally:
            daemon.stop(30)
        # 3. children that end with os._exit
        start = time.monotonic()
        job = launcher_job(setup, collector.address, "forks", "max", 1, code=FORK_CODE)
        _, err = job.communicate(timeout=90)
        state = _states(data, "forks", timeout=20)
        figures = run_figures(data, "forks")
        r.add(f"forking job (exit {job.returncode}, {time.monotonic() - start:.1f} s): "
              f"{figures.runs} run(s), jobs says {state[:200]}")  # fmt: skip
        ok = ok and state.startswith("finished")
        # 4. a reconnect racing its old call
        ok = _reconnect_race(collector.address, data, r) and ok
    finally:
        collector.stop(30)
    r.held = ok
    return r


def _reconnect_race(address: str, data: Path, r: Result) -> bool:
    """An agent's old call stays open (its connection hangs) while the agent, reconnected,
    finishes the same stream on a new call: is the run finished, and its log closed?"""
    import threading

    from tfprof.proto import collector_pb2 as pb

    stream_id = uuid.uuid4().hex
    first = hello("race", "run1", stream_id)
    # The secret a fixed collector may want on a resuming hello (a field of Hello).
    for name in ("stream_secret", "resume_secret", "secret", "nonce"):
        if name in pb.Hello.DESCRIPTOR.fields_by_name:
            field = pb.Hello.DESCRIPTOR.fields_by_name[name]
            value = os.urandom(16)
            setattr(first.hello, name, value if field.type == field.TYPE_BYTES else value.hex())
    hung = threading.Event()

    def old_call() -> None:
        def messages() -> Iterator[pb.AgentMessage]:
            yield first
            yield kernels_batch(1, 10)
            hung.wait(20)  # the connection hangs: nothing more, no end

        stream(address, messages(), timeout=25)

    thread = threading.Thread(target=old_call, daemon=True)
    thread.start()
    log = data / "jobs" / "race" / "run1" / stream_id / "batches.log"
    wait_for(lambda: log.exists() and log.stat().st_size > 0, 10)
    bye = pb.AgentMessage(goodbye=pb.Goodbye(records_sent=20))
    acks, status = stream(address, [first, kernels_batch(2, 10), bye], timeout=15)
    time.sleep(3.0)
    state = _states(data, "race", timeout=0.1)
    r.add(f"reconnect finished the stream (acks {acks}, {status}); 3 s later, with the old "
          f"call still open, jobs says {state}")  # fmt: skip
    hung.set()
    thread.join(30)
    return state.startswith("finished")
