"""The hostile local user's programs (run by /usr/bin/python3 as that user, standard
library only). What it needs of tfprof it reads where any user of the node can: the
bootstrap folder beside the daemon's socket (the hook's own modules).

    attacker.py flood SOCKET N            N idle connections, held until stdin closes
    attacker.py oversize SOCKET CONNS MIB a 2^30-1 byte frame header, then MIB MiB each
    attacker.py inject SOCKET BOOTSTRAP JOB SLURM_JOB_ID N   N fake kernels into that run
    attacker.py snoop SECRET DIR...       every file of DIR... it can read, and the secret
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import socket
import struct
import sys
import time


def hold() -> None:
    """Keep what was opened until the orchestrator closes our stdin."""
    sys.stdout.flush()
    sys.stdin.read()


def flood(path: str, count: int) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    conns, failed, errors = [], 0, set()
    deadline = time.monotonic() + 20
    for _ in range(count):
        if time.monotonic() > deadline:
            failed += 1
            continue
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        while True:
            try:
                s.connect(path)
                conns.append(s)
                break
            except BlockingIOError:  # the listen backlog is full: wait for accept()
                if time.monotonic() < deadline:
                    time.sleep(0.005)
                    continue
                failed += 1
                errors.add("backlog full until the deadline")
            except OSError as exc:
                failed += 1
                errors.add(type(exc).__name__ + (f" {exc.errno}" if exc.errno else ""))
            s.close()
            break
    print(f"opened {len(conns)} failed {failed} {','.join(sorted(errors))}", flush=True)
    hold()
    for s in conns:
        s.close()


def oversize(path: str, conns: int, mib: int) -> None:
    header = struct.pack("<BI", 1, (1 << 30) - 1)  # a HELLO frame of 1 GiB - 1
    chunk = bytes(1 << 20)
    held, report = [], []
    for _ in range(conns):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5.0)
        sent, error = 0, ""
        try:
            s.connect(path)
            s.sendall(header)
            for _ in range(mib):
                s.sendall(chunk)
                sent += len(chunk)
        except OSError as exc:
            error = f" ({type(exc).__name__})"
        held.append(s)
        report.append(f"{sent >> 20}{error}")
    print("sent MiB per connection: " + " ".join(report), flush=True)
    hold()


def inject(path: str, bootstrap: str, job: str, slurm_job: str, count: int) -> None:
    # The run id of a Slurm job is computed from its public id (squeue shows it) by the
    # hook's own code, which the bootstrap folder hands to every user.
    sys.path.insert(0, os.path.join(bootstrap, "hook-lib"))
    # Where the hook's modules live moved between releases; the bootstrap has one.
    for package in ("tfprof.agent.inprocess", "tfprof.agent"):
        try:
            frames = importlib.import_module(f"{package}.frames")
            identity = importlib.import_module(f"{package}.identity")
            break
        except ImportError:
            continue
    else:
        raise SystemExit(f"no hook modules in {bootstrap}")
    COLUMNS = importlib.import_module("tfprof.core.records").COLUMNS

    scheduler = identity.scheduler_job({"SLURM_JOB_ID": slurm_job, "SLURM_JOB_NAME": job})
    name, run_id = identity.resolve(job, "", scheduler, ["python", "train.py"])
    now = time.time_ns()
    hello = {
        "job": name, "run_id": run_id, "pid": os.getpid(), "ppid": os.getppid(),
        "task": "0", "argv": ["python", "train.py"], "capture": "always", "source": "cupti",
        "clock": {"realtime_ns": now, "monotonic_ns": time.monotonic_ns(), "tracer_ns": now},
    }  # fmt: skip
    columns = {c: [0] * count for c in COLUMNS}
    columns["kind"] = [1] * count
    columns["start_ns"] = [now - 10**9 + i * 1000 for i in range(count)]
    columns["duration_ns"] = [900] * count
    columns["name"] = [1] * count
    columns["stream"] = [7] * count
    blob = json.dumps(["injected_by_mallory"]).encode()
    payload = struct.pack("<QIII", 0, 1, len(blob), count) + blob
    payload += b"".join(struct.pack(f"<{count}q", *columns[c]) for c in COLUMNS)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    goodbye = {"records_sent": count, "dropped_queue": 0, "dropped_tracer": 0}
    try:
        s.sendall(frames.encode_json_frame(frames.FrameType.HELLO, hello))
        time.sleep(0.5)  # the daemon decides on the hello before the records come
        s.sendall(struct.pack("<BI", frames.FrameType.RECORDS, len(payload)) + payload)
        s.sendall(frames.encode_json_frame(frames.FrameType.GOODBYE, goodbye))
        s.shutdown(socket.SHUT_WR)
        s.settimeout(10)
        while s.recv(1 << 16):
            pass
    except OSError as exc:
        print(f"sent a hello as job {name} run {run_id}; the daemon hung up "
              f"({type(exc).__name__}) before the records went", flush=True)  # fmt: skip
        s.close()
        return
    s.close()
    print(f"injected {count} kernels as job {name} run {run_id}", flush=True)


def snoop(secret: str, roots: list[str]) -> None:
    readable = found = total = 0
    where = []
    for root in roots:
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                total += 1
                path = os.path.join(dirpath, name)
                try:
                    with open(path, "rb") as f:
                        data = f.read(1 << 20)
                except OSError:
                    continue
                readable += 1
                if secret.encode() in data:
                    found += 1
                    where.append(path)
    print(json.dumps({"files": total, "readable": readable, "with_secret": found,
                      "where": where[:4]}), flush=True)  # fmt: skip


def main() -> None:
    command, args = sys.argv[1], sys.argv[2:]
    if command == "flood":
        flood(args[0], int(args[1]))
    elif command == "oversize":
        oversize(args[0], int(args[1]), int(args[2]))
    elif command == "inject":
        inject(args[0], args[1], args[2], args[3], int(args[4]))
    elif command == "snoop":
        snoop(args[0], args[1:])
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main()
