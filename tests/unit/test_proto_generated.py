"""The checked-in generated stubs are exactly what scripts/gen_proto.sh makes."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROTO = ROOT / "proto" / "src" / "tfprof" / "proto"
GENERATED = ("collector_pb2.py", "collector_pb2.pyi", "collector_pb2_grpc.py",
             "collector_pb2_grpc.pyi")  # fmt: skip


@pytest.mark.timeout(120)
def test_generated_stubs_match_the_proto(tmp_path: Path) -> None:
    if importlib.util.find_spec("grpc_tools") is None:
        pytest.skip("grpc_tools is not importable: install the dev extra (grpcio-tools)")
    if shutil.which("bash") is None:
        pytest.skip("bash is not available to run scripts/gen_proto.sh")
    # The script runs `python` and protoc's mypy plugins from PATH: use this interpreter's.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["bash", str(ROOT / "scripts" / "gen_proto.sh"), str(tmp_path)], env=env,
                   check=True, timeout=100)  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(GENERATED)
    stale = [
        name for name in GENERATED if (tmp_path / name).read_bytes() != (PROTO / name).read_bytes()
    ]
    assert not stale, f"regenerate with scripts/gen_proto.sh: {stale} differ from {PROTO}"
