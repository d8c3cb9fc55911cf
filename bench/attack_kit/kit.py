"""Real processes for the attacks: throwaway users, a collector, a node daemon, traced
jobs run as the victim user, attacker programs run as the attacker user, and the
figures read from /proc."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sized
from dataclasses import dataclass, field
from pathlib import Path

from bench.attack_kit.host import (
    Stats,
    User,
    as_user,
    create_user,
    find_memory_cgroup,
    remove_user,
    stats,
)

HERE = Path(__file__).resolve().parent
ATTACKER = HERE / "attacker.py"  # stdlib only: run by /usr/bin/python3 as the attacker
SYSTEM_PYTHON = "/usr/bin/python3"  # readable by every user (the venv's is under /root)
# What systemd gives a unit that sets no LimitNOFILE (DefaultLimitNOFILE=1024:524288),
# as deploy/systemd/tfprof-agent-daemon.service does today.
SYSTEMD_NOFILE = (1024, 524288)


@dataclass
class Setup:
    python: str  # an interpreter that imports tfprof (the project's venv)
    pythonpath: str  # prepended to PYTHONPATH of every tfprof process ('' = none)
    trace: Path  # replayed by traced jobs (a copy every user can read)
    records_per_replay: int
    base: Path  # this run's scratch folder (0755: users reach the sockets in it)
    victim: User
    attacker: User
    memory_cgroup: Path | None  # a cgroup folder we may create children in
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    def env(self, **extra: str) -> dict[str, str]:
        # The bench's own environment, less tfprof's settings (like the tests' clean_env).
        env = {k: v for k, v in os.environ.items() if not k.startswith("TFPROF_")}
        if self.pythonpath:
            env["PYTHONPATH"] = self.pythonpath
        env["PYTHONUNBUFFERED"] = "1"
        env["HOME"] = str(self.base / "home")  # any `INSTALL` lands here, not in ~root
        env.update(extra)
        return env

    def agent(self, *args: str) -> list[str]:
        return [self.python, "-m", "tfprof.agent.cli", *args]

    def collector(self, *args: str) -> list[str]:
        return [self.python, "-m", "tfprof.collector.cli", *args]

    def folder(self, name: str, mode: int = 0o755) -> Path:
        path = self.base / name
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(mode)
        return path


# -- services ----------------------------------------------------------------------------


@dataclass
class Service:
    name: str
    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    address: str = ""

    def output(self) -> str:
        return "".join(self.lines)

    def stats(self) -> Stats:
        return stats(self.proc.pid)

    def wait_for(self, text: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while text not in self.output() and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                time.sleep(0.2)  # let the pump read the rest
                break
            time.sleep(0.05)
        return text in self.output()

    def stop(self, timeout: float = 30) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def _pump(service: Service) -> None:
    assert service.proc.stdout is not None
    for line in service.proc.stdout:
        service.lines.append(line)


def spawn(
    setup: Setup,
    name: str,
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    preexec: Callable[[], None] | None = None,
) -> Service:
    proc = subprocess.Popen(
        argv, env=env or setup.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, preexec_fn=preexec, start_new_session=True,
    )  # fmt: skip
    setup.procs.append(proc)
    service = Service(name, proc)
    threading.Thread(target=_pump, args=(service,), daemon=True).start()
    return service


def memory_limited(setup: Setup, name: str, limit_bytes: int) -> tuple[Path, Callable[[], None]]:
    """A fresh memory cgroup of ``limit_bytes`` (cgroup v2 memory.max or v1
    memory.limit_in_bytes) and the preexec function that puts a child in it."""
    if setup.memory_cgroup is None:
        raise RuntimeError("no writable memory cgroup here")
    group = setup.memory_cgroup / f"tfprof-attack-{os.getpid()}-{name}"
    group.mkdir(exist_ok=True)
    if (group / "memory.max").exists():
        (group / "memory.max").write_text(str(limit_bytes))
        with contextlib.suppress(OSError):
            (group / "memory.swap.max").write_text("0")
    else:
        (group / "memory.limit_in_bytes").write_text(str(limit_bytes))
        with contextlib.suppress(OSError):
            (group / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
    procs = str(group / "cgroup.procs")

    def enter() -> None:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))

    return group, enter


def start_collector(
    setup: Setup,
    data_dir: Path,
    *flags: str,
    preexec: Callable[[], None] | None = None,
    listen: str = "127.0.0.1:0",
    timeout: float = 60,
) -> Service:
    argv = setup.collector("serve", "--listen", listen, "--data-dir", str(data_dir), *flags)
    service = spawn(setup, "collector", argv, preexec=preexec)
    if not service.wait_for("listening on ", timeout):
        service.stop(5)
        raise RuntimeError("collector did not start:\n" + service.output())
    line = next(ln for ln in service.lines if ln.startswith("listening on "))
    service.address = line.split()[-1]
    return service


def start_daemon(
    setup: Setup,
    collector: str,
    folder: Path,
    nofile: tuple[int, int] = SYSTEMD_NOFILE,
    **env: str,
) -> Service:
    """A node daemon on ``folder``/agent.sock with the open-files limit a systemd unit
    without LimitNOFILE gets."""

    # The hard limit as systemd's, or ours where this sandbox cannot raise it.
    hard = min(nofile[1], resource.getrlimit(resource.RLIMIT_NOFILE)[1])

    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile[0], hard))

    argv = setup.agent(
        "daemon", "--collector", collector, "--socket", str(folder / "agent.sock"),
        "--spool-dir", str(folder / "spool"),
    )  # fmt: skip
    service = spawn(setup, "daemon", argv, env=setup.env(**env), preexec=limits)
    if not service.wait_for("daemon listening on", 60):
        service.stop(5)
        raise RuntimeError("daemon did not start:\n" + service.output())
    return service


def node_env(setup: Setup, socket_path: Path, job: str, **extra: str) -> dict[str, str]:
    """What `tfprof-agent env` prints for ``job``, plus a replay source (no GPU here)."""
    out = subprocess.run(
        setup.agent("env", "--socket", str(socket_path), "--job", job, "--capture", "always",
                    "--format", "json"),
        env=setup.env(), capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    env: dict[str, str] = json.loads(out.stdout)
    # TMPDIR: a replay through a daemon claims its run in the temporary folder; ours,
    # so a run id used in an earlier attack run (Slurm ids repeat) replays again.
    env.update(
        PATH="/usr/bin:/bin", HOME="/nonexistent", TFPROF_SOURCE=f"replay:{setup.trace}",
        TMPDIR=str(setup.folder("tmp", 0o1777)),
        TFPROF_REPLAY_SPEED="max", TFPROF_EXIT_TIMEOUT="5", PYTHONUNBUFFERED="1",
    )  # fmt: skip
    env.update(extra)
    return env


def traced_as(
    setup: Setup, user: User, env: dict[str, str], code: str, *args: str
) -> subprocess.Popen[str]:
    """``python3 -c code`` run by ``user`` with the daemon's environment ``env``."""
    proc = subprocess.Popen(
        as_user(user, [SYSTEM_PYTHON, "-c", code, *args], env),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    setup.procs.append(proc)
    return proc


def attacker(setup: Setup, *args: str, user: User | None = None) -> subprocess.Popen[str]:
    """attacker.py run by the attacker user (stdlib only, /usr/bin/python3)."""
    proc = subprocess.Popen(
        as_user(user or setup.attacker, [SYSTEM_PYTHON, str(setup.base / "attacker.py"), *args]),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    setup.procs.append(proc)
    return proc


def read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """The next line the process prints, or '' after ``timeout``."""
    assert proc.stdout is not None
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout)
    return box[0].strip() if box else ""


# -- what the collector stored -----------------------------------------------------------


@dataclass(frozen=True)
class RunFigures:
    runs: int
    records: int
    dropped: int
    states: tuple[str, ...]
    reasons: tuple[str, ...]


def run_figures(data_dir: Path, job: str) -> RunFigures:
    from tfprof.collector.store.catalog import list_runs

    infos = [i for i in list_runs(data_dir / "jobs") if i.name == job]
    return RunFigures(
        len(infos),
        sum(i.records for i in infos),
        sum(i.dropped for i in infos),
        tuple(i.state for i in infos),
        tuple(i.reason for i in infos if i.reason),
    )


@dataclass(frozen=True)
class Delivery:
    sent: int
    stored: int
    dropped: int
    seconds: float | None  # until every record was stored (None: not within the wait)
    notes: str

    @property
    def whole(self) -> bool:
        return self.seconds is not None

    def __str__(self) -> str:
        took = f"in {self.seconds:.1f} s" if self.seconds is not None else "NOT within the wait"
        return (f"sent {self.sent:,} = stored {self.stored:,} + dropped {self.dropped:,}? "
                f"{'yes' if self.sent == self.stored + self.dropped else 'NO'}; delivered {took}"
                + (f" ({self.notes})" if self.notes else ""))  # fmt: skip


def legit_job(
    setup: Setup, socket_path: Path, data_dir: Path, job: str, repeat: int, wait_s: float
) -> Delivery:
    """A victim job through the daemon: how long until all its records are stored."""
    sent = setup.records_per_replay * repeat
    env = node_env(setup, socket_path, job, TFPROF_REPLAY_REPEAT=str(repeat))
    start = time.monotonic()
    proc = traced_as(setup, setup.victim, env, "print('job done')")
    deadline = start + wait_s
    took = None
    figures = run_figures(data_dir, job)
    while time.monotonic() < deadline:
        figures = run_figures(data_dir, job)
        if figures.records >= sent:
            took = time.monotonic() - start
            break
        time.sleep(0.2)
    try:
        _, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()) + 10)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    notes = " ".join(line.strip() for line in err.splitlines() if "tfprof" in line)
    return Delivery(sent, figures.records, figures.dropped, took, notes[:300])


# -- the scratch folder -------------------------------------------------------------------


def _trace_loader() -> Callable[[Path], Sized]:
    """tfprof's trace reader (tfprof.readers since the modules moved, tfprof.core.formats
    before)."""
    for module in ("tfprof.readers", "tfprof.core.formats"):
        try:
            found: Callable[[Path], Sized] = importlib.import_module(module).load_trace
            return found
        except (ImportError, AttributeError):
            continue
    raise ImportError("no load_trace in tfprof.readers or tfprof.core.formats")


@contextlib.contextmanager
def scratch(python: str, pythonpath: str, trace: Path, keep: bool) -> Iterator[Setup]:
    """A scratch folder, the two users and everything started in it; all of it removed
    (processes killed by their process group, users deleted) however the run ends."""
    records = len(_trace_loader()(trace))
    base = Path(tempfile.mkdtemp(prefix="tfa-", dir="/tmp"))  # short: socket paths
    users: list[User] = []
    procs: list[subprocess.Popen[str]] = []
    try:
        base.chmod(0o755)
        for source, name in ((ATTACKER, "attacker.py"), (trace, "trace.json")):
            shutil.copy(source, base / name)
            (base / name).chmod(0o644)
        (base / "home").mkdir()
        tag = f"{os.getpid() % 100000}"
        users.append(create_user(f"tfa-alice{tag}"))
        users.append(create_user(f"tfa-mal{tag}"))
        setup = Setup(
            python, pythonpath, base / "trace.json", records, base, users[0], users[1],
            find_memory_cgroup(), procs,
        )  # fmt: skip
        yield setup
    finally:
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)
        for user in users:
            remove_user(user)
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
