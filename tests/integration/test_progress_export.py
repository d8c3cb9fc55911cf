"""``tfprof-collector export`` as a real process: progress on a terminal only, and Ctrl-C
mid-export leaves one ``tfprof-collector:`` line and no partial output behind."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from tfprof.collector.store import Store
from tfprof.core.version import PROTOCOL_VERSION
from tfprof.proto import collector_pb2 as pb

BATCH = 20_000
CLI = [sys.executable, "-m", "tfprof.collector.cli"]


def clean_env() -> dict[str, str]:
    """No variable that would make rich treat a pipe as a terminal, or drop styling."""
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    env["TERM"] = "xterm"
    return env


def data_dir(root: Path, batches: int) -> Path:
    """A real store with ``batches * BATCH`` kernels in one stream."""
    store = Store(root)
    hello = pb.Hello(protocol_version=PROTOCOL_VERSION, stream_secret=b"s" * 32,
                     job="train", run_id="r1", host="h", pid=1, task="0",
                     stream_id="s1", devices=[pb.Device(ordinal=0, uuid="GPU-a")])  # fmt: skip
    writer = store.open_stream(hello)
    try:
        for seq in range(1, batches + 1):
            batch = pb.Batch(seq=seq)
            if seq == 1:
                batch.string_base = 0
                batch.strings.extend(["", "gemm", "relu"])
            first = (seq - 1) * BATCH
            rec = batch.records
            rec.kind.extend([pb.KERNEL] * BATCH)
            rec.start_ns.extend(range(first * 2_000, (first + BATCH) * 2_000, 2_000))
            rec.duration_ns.extend([1_000] * BATCH)
            rec.name.extend([1, 2] * (BATCH // 2))
            writer.append(batch)
        writer.finish(pb.Goodbye(records_sent=batches * BATCH, exit_code=0))
    finally:
        writer.close()
    return root


def test_ctrl_c_mid_export_leaves_no_partial_file(tmp_path: Path) -> None:
    data = data_dir(tmp_path / "data", batches=30)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = subprocess.Popen(
        [*CLI, "export", "--data-dir", str(data), "-o", str(out_dir / "t.json")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_env(),
    )
    try:
        deadline = time.monotonic() + 120
        while not any(out_dir.iterdir()):  # the partial file appears: mid-export
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "export never started writing"
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert err.decode().splitlines() == ["tfprof-collector: interrupted"]
    assert proc.returncode == 130
    assert list(out_dir.iterdir()) == []


def test_progress_only_on_a_terminal(tmp_path: Path) -> None:
    data = data_dir(tmp_path / "data", batches=1)
    out = tmp_path / "t.json"
    cmd = [*CLI, "export", "--data-dir", str(data), "-o", str(out)]

    piped = subprocess.run(cmd, capture_output=True, env=clean_env(), timeout=120, check=True)
    assert piped.stderr.decode() == f"tfprof-collector: wrote {out}: {BATCH:,} slices\n"
    out.unlink()

    main, child = pty.openpty()
    try:
        proc = subprocess.Popen(cmd, stdout=child, stderr=child, env=clean_env())
        os.close(child)
        seen = b""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # the child side closed: the process ended
                    break
                if not chunk:
                    break
                seen += chunk
        assert proc.wait(timeout=60) == 0
    finally:
        os.close(main)
    text = seen.decode(errors="replace")
    assert "loading" in text and "writing" in text  # the progress lines were shown
    assert f"tfprof-collector: wrote {out}" in text
    assert out.exists()
