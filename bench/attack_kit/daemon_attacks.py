"""Attacks of a local user on the node daemon's Unix socket (mode 0666 by design: every
user's jobs connect to it)."""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.attack_kit.kit import (
    Setup,
    attacker,
    legit_job,
    read_line,
    run_figures,
    start_collector,
    start_daemon,
)
from bench.attack_kit.result import Result

LEGIT_REPEAT = 4  # replays of the trace per legitimate job (records_per_replay each)
LEGIT_WAIT_S = 15.0


def _quiet_lines(output: str, words: tuple[str, ...]) -> list[str]:
    return [ln.strip() for ln in output.splitlines() if any(w in ln for w in words)]


def connection_flood(setup: Setup, connections: int = 1100) -> Result:
    r = Result(
        "daemon connection flood",
        f"user {setup.attacker.name} opens {connections} idle connections to the daemon "
        "socket (daemon started with RLIMIT_NOFILE 1024:524288, what a systemd unit "
        f"without LimitNOFILE gets); jobs of user {setup.victim.name} run during the flood "
        "and after the attacker left",
    )
    data, node = setup.folder("flood/data"), setup.folder("flood/node")
    collector = start_collector(setup, data)
    daemon = start_daemon(setup, collector.address, node)
    sock = node / "agent.sock"
    try:
        r.add(f"daemon before: {daemon.stats()}")
        base = legit_job(setup, sock, data, "legit-before", LEGIT_REPEAT, LEGIT_WAIT_S)
        r.add(f"legit job before the flood: {base}")
        flood = attacker(setup, "flood", str(sock), str(connections))
        opened = read_line(flood, 45)
        r.add(f"attacker: {opened or 'no answer in 45 s'}")
        time.sleep(1.0)
        r.add(f"daemon during the flood: {daemon.stats()}")
        during = legit_job(setup, sock, data, "legit-during", LEGIT_REPEAT, LEGIT_WAIT_S)
        r.add(f"legit job during the flood: {during}")
        assert flood.stdin is not None
        flood.stdin.close()
        flood.wait(15)
        time.sleep(1.0)
        r.add(f"daemon after the attacker left: {daemon.stats()}")
        after = legit_job(setup, sock, data, "legit-after", LEGIT_REPEAT, LEGIT_WAIT_S)
        r.add(f"legit job after the attacker left: {after}")
        said = _quiet_lines(daemon.output(), ("refused", "accept", "EMFILE", "open files"))
        r.add(f"daemon log lines about it: {len(said)}" + (f" (first: {said[0]})" if said else ""))
        r.held = during.whole and after.whole
    finally:
        daemon.stop(20)
        collector.stop(20)
    return r


def oversized_header(setup: Setup, connections: int = 3, mib: int = 96) -> Result:
    r = Result(
        "oversized frame before hello",
        f"user {setup.attacker.name} opens {connections} connections; each sends a frame "
        f"header claiming 2^30-1 bytes (no hello) and then {mib} MiB of zeros",
    )
    data, node = setup.folder("oversize/data"), setup.folder("oversize/node")
    collector = start_collector(setup, data)
    daemon = start_daemon(setup, collector.address, node)
    sock = node / "agent.sock"
    try:
        before = daemon.stats()
        r.add(f"daemon before: {before}; virtual size {_vm_size_mb(daemon.proc.pid):.0f} MB")
        atk = attacker(setup, "oversize", str(sock), str(connections), str(mib))
        line = read_line(atk, 50)
        r.add(f"attacker: {line or 'no answer in 50 s'}")
        time.sleep(0.5)
        during = daemon.stats()
        vm = _vm_size_mb(daemon.proc.pid)
        r.add(f"daemon holding them: {during}; virtual size {vm:.0f} MB")
        grew = during.rss_mb - before.rss_mb
        r.add(
            f"daemon RSS grew by {grew:.0f} MB for {connections} connections that never said hello"
        )
        legit = legit_job(setup, sock, data, "legit-oversize", LEGIT_REPEAT, LEGIT_WAIT_S)
        r.add(f"legit job meanwhile: {legit}")
        assert atk.stdin is not None
        atk.stdin.close()
        atk.wait(15)
        # Held: the daemon refused the frame at its header (a small pre-hello limit),
        # so it holds no more than a few MB for all of them.
        r.held = during.alive and grew < 16 and legit.whole
    finally:
        daemon.stop(20)
        collector.stop(20)
    return r


def _vm_size_mb(pid: int) -> float:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    for line in status.splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) / 1024
    return 0.0


def fake_hook_injection(setup: Setup, kernels: int = 1000) -> Result:
    r = Result(
        "fake hook injects into another user's run",
        f"user {setup.victim.name} runs Slurm job 4242 as job 'resnet' through the daemon; "
        f"user {setup.attacker.name} computes its run id with the bootstrap's own code and "
        f"sends a hello for that job and run plus {kernels} fake kernels",
    )
    data, node = setup.folder("inject/data"), setup.folder("inject/node")
    collector = start_collector(setup, data)
    daemon = start_daemon(setup, collector.address, node)
    sock = node / "agent.sock"
    try:
        from bench.attack_kit.kit import node_env, traced_as

        repeat = LEGIT_REPEAT
        env = node_env(setup, sock, "resnet", SLURM_JOB_ID="4242", SLURM_PROCID="0",
                       TFPROF_REPLAY_REPEAT=str(repeat))  # fmt: skip
        victim = traced_as(setup, setup.victim, env, "print('job done')")
        _, err = victim.communicate(timeout=60)
        sent = setup.records_per_replay * repeat
        start = time.monotonic()
        while run_figures(data, "resnet").records < sent and time.monotonic() - start < 20:
            time.sleep(0.2)
        stored = run_figures(data, "resnet").records
        r.add(
            f"victim job (exit {victim.returncode}) stored {stored:,} of {sent:,} records "
            f"before the attack" + (f"; it said: {err.strip()[:200]}" if err.strip() else "")
        )
        atk = attacker(setup, "inject", str(sock), str(node / "bootstrap"), "resnet", "4242",
                       str(kernels))  # fmt: skip
        line = read_line(atk, 30)
        r.add(f"attacker: {line or 'no answer'}")
        atk.wait(15)
        deadline = time.monotonic() + 20
        figures = run_figures(data, "resnet")
        while time.monotonic() < deadline:
            figures = run_figures(data, "resnet")
            if figures.records >= sent + kernels or (
                "streaming" not in figures.states and figures.records >= sent
            ):
                time.sleep(1.0)
                figures = run_figures(data, "resnet")
                break
            time.sleep(0.3)
        foreign = _foreign_records(data, setup.victim.uid)
        r.add(f"victim run(s) of job resnet: {figures.runs}, records stored {figures.records:,} "
              f"(victim sent {sent:,}, dropped {figures.dropped:,})")  # fmt: skip
        r.add(f"records in the victim's run from streams the victim did not open: {foreign:,}")
        r.add(f"daemon: {daemon.stats()}; collector: {collector.stats()}")
        r.held = foreign == 0 and figures.records == sent
    finally:
        daemon.stop(20)
        collector.stop(20)
    return r


def _foreign_records(data: Path, victim_uid: int) -> int:
    """Records of the resnet runs in streams whose process was not the victim's: the
    victim's processes are `print('job done')` under python3; the attacker's hello says
    `train.py` (we tell them apart by argv, as the collector keeps no uid today)."""
    from tfprof.proto import collector_pb2 as pb

    read_log_state = _read_log_state()

    total = 0
    for hello_path in (data / "jobs" / "resnet").glob("*/*/hello.pb"):
        hello = pb.Hello.FromString(hello_path.read_bytes())
        if "train.py" in " ".join(hello.argv):
            total += read_log_state(hello_path.parent).summary.records
    return total


def _read_log_state() -> Callable[[Path], Any]:
    """store.summary's reader (store.stream_counts since the modules moved)."""
    for module in ("tfprof.collector.store.stream_counts", "tfprof.collector.store.summary"):
        try:
            found: Callable[[Path], Any] = importlib.import_module(module).read_log_state
            return found
        except ImportError:
            continue
    raise ImportError("no read_log_state in tfprof.collector.store")
