"""What the benches that replay one trace as several ranks share: a collector to send to,
and the shell line that starts the ranks (``bench/dist_straggler.py``,
``bench/steps_and_ranks.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def env() -> dict[str, str]:
    """The bench's environment without tfprof's own settings (each run sets its own)."""
    out = {k: v for k, v in os.environ.items() if not k.startswith("TFPROF_")}
    out.update(TF_CPP_MIN_LOG_LEVEL="3", PY=sys.executable)
    return out


def serve(data: Path) -> tuple[subprocess.Popen[str], str]:
    """A collector on a free loopback port storing under ``data``, and its address."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfprof.collector.cli", "serve", "--listen", "127.0.0.1:0",
         "--data-dir", str(data)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env(),
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("listening on "):
            return proc, line.split()[-1]
    raise SystemExit("the collector did not start")


def ranks_script(ranks: int, gap: float, stretch_rank: int, stretch: float) -> str:
    """A ``bash -c`` line starting ``ranks`` Python processes ``gap`` seconds apart, each
    with its ``RANK`` (so each replays the trace as that rank), ``stretch_rank`` at
    ``TFPROF_REPLAY_STRETCH=stretch`` unless it is 1; it waits for all of them."""
    return (
        "; ".join(
            (f"TFPROF_REPLAY_STRETCH={stretch} " if r == stretch_rank and stretch != 1 else "")
            + f"RANK={r} \"$PY\" -c 'import time; time.sleep(1)' & sleep {gap}"
            for r in range(ranks)
        )
        + "; wait"
    )
