"""The zero-code step markers (step_markers.py) inside real PyTorch and Keras processes.

Each case runs in a fresh interpreter (the markers patch the frameworks for the life of a
process): it installs the markers before the framework is imported, as the hook does,
trains, and prints what was reported as JSON.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

INSTALL = """
import json, sys
from tfprof.agent.inprocess import step_markers
boundaries, steps, warnings = [], [], []
step_markers.install(boundaries.append, lambda *a: steps.append(a), warnings.append)
"""
REPORT = """
print(json.dumps({"boundaries": boundaries, "steps": [[n, s, e, m] for n, s, e, _, m in steps],
                  "warnings": warnings}))
"""


def run(body: str, cwd: Path | None = None, install: str = INSTALL) -> dict[str, Any]:
    code = install + textwrap.dedent(body) + REPORT
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow"}
    if cwd is not None:
        env["PYTHONPATH"] = f"{cwd}{os.pathsep}{env.get('PYTHONPATH', '')}"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=240, env=env, cwd=cwd)  # fmt: skip
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="PyTorch is not installed"
)


@needs_torch
def test_pytorch_steps_count_the_first_optimizer_only() -> None:
    out = run("""
        import gc, torch
        a, b = torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)
        x = torch.randn(8, 4)
        opt_a = torch.optim.SGD(a.parameters(), lr=0.1)
        opt_b = torch.optim.Adam(b.parameters())
        for _ in range(5):  # two optimizers per iteration: five steps, not ten
            (a(x).sum() + b(x).sum()).backward()
            opt_a.step(); opt_b.step()
        del opt_a; gc.collect()  # the first optimizer gone: the next one counts
        for _ in range(2):
            b(x).sum().backward()
            opt_b.step()
    """)
    assert out["warnings"] == []
    assert len(out["boundaries"]) == 7
    numbers = [n for n, _, _, _ in out["steps"]]
    assert numbers == [1, 2, 3, 4, 5, 6]  # step 0 began unseen; step 7 never ended
    for (_, start, end, marker), later in zip(out["steps"], out["steps"][1:], strict=False):
        assert marker == "torch.optim" and start < end == later[1]  # contiguous steps
    assert [s for _, s, _, _ in out["steps"]] == out["boundaries"][:6]


def test_keras_calls_are_steps_and_steps_per_execution_counts() -> None:
    out = run("""
        import numpy as np, keras
        x, y = np.zeros((32, 4), "float32"), np.zeros((32, 1), "float32")
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse", steps_per_execution=2)
        model.fit(x, y, batch_size=4, epochs=1, verbose=0)  # 8 batches, 4 calls
        other = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        other.compile(optimizer="sgd", loss="mse")
        for _ in range(3):
            other.train_on_batch(x[:4], y[:4])
    """)
    assert out["warnings"] == []
    numbers = [n for n, _, _, _ in out["steps"]]
    assert numbers == [0, 2, 4, 6, 8, 9, 10]
    assert {m for _, _, _, m in out["steps"]} == {"keras"}
    assert [s for _, s, _, _ in out["steps"]] == out["boundaries"]
    assert all(s < e for _, s, e, _ in out["steps"])


def test_a_framework_without_the_api_gets_one_line(tmp_path: Path) -> None:
    # A stand-in ``torch`` of PyTorch 1.13's shape: torch.optim.optimizer without the
    # global hooks (PyTorch 1.x itself does not install on this Python).
    optim = tmp_path / "torch" / "optim"
    optim.mkdir(parents=True)
    (tmp_path / "torch" / "__init__.py").write_text("__version__ = '1.13.1'\nfrom . import optim\n")
    (optim / "__init__.py").write_text("from . import optimizer\n")
    (optim / "optimizer.py").write_text("class Optimizer: pass\n")
    out = run("import torch\n", cwd=tmp_path)
    assert out["warnings"] == [
        "PyTorch 1.13.1 has no global optimizer-step hook (it came with 2.0): its training "
        "steps are not marked"
    ]


def test_a_failure_of_ours_is_one_line_never_the_jobs() -> None:
    install = INSTALL.replace(
        "step_markers.install(boundaries.append, lambda *a: steps.append(a), warnings.append)",
        "def broken(*args):\n    raise RuntimeError('sink gone')\n"
        "step_markers.install(broken, broken, warnings.append)",
    )
    body = """
        import numpy as np, keras
        x, y = np.zeros((16, 4), "float32"), np.zeros((16, 1), "float32")
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        model.fit(x, y, batch_size=4, epochs=1, verbose=0)  # trains: 4 steps
    """
    out = run(body, install=install)
    assert set(out["warnings"]) == {"a training step was not marked (RuntimeError: sink gone)"}
