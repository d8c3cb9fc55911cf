#!/usr/bin/env bash
# Regenerates proto/src/tfprof/proto/*_pb2*.py(i) from collector.proto beside them. The generator versions are
# pinned (pyproject's test extra); tests/unit/test_proto_generated.py fails when the
# checked-in output differs from what this script makes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/proto/src/tfprof/proto}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Lay the source out under its import path so generated imports read `from tfprof.proto import ...`.
mkdir -p "$work/src/tfprof/proto" "$work/out"
cp "$root/proto/src/tfprof/proto/collector.proto" "$work/src/tfprof/proto/"
python -m grpc_tools.protoc -I "$work/src" \
  --python_out="$work/out" --grpc_python_out="$work/out" \
  --mypy_out="$work/out" --mypy_grpc_out="$work/out" \
  "$work/src/tfprof/proto/collector.proto"
cp "$work/out/tfprof/proto/"collector_pb2*.py* "$out/"
