#!/usr/bin/env bash
# The agent installs and runs on its own, as in a training image: `pip install ./proto
# ./readers ./agent` into a fresh virtualenv, with none of the collector's dependencies, streams a
# replayed GPU trace to a collector (run from the full install in .venv) and every record
# arrives. numpy comes in only because cupti-python requires it; it is uninstalled here to
# prove the agent's own code never needs it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
full=${TFPROF_FULL_VENV:-$root/.venv}/bin
work=$(mktemp -d)
collector_pid=
cleanup() {
  if [ -n "$collector_pid" ]; then kill "$collector_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

python3 -m venv "$work/agent-venv"
agent="$work/agent-venv/bin"
"$agent/python" -m pip install --quiet "$root/proto" "$root/readers" "$root/agent"
for module in orjson perfetto prometheus_client rich duckdb pyarrow; do
  if "$agent/python" -c "import $module" 2>/dev/null; then
    echo "check_agent_install: the agent install brought in $module" >&2
    exit 1
  fi
done
"$agent/python" -m pip uninstall --quiet --yes numpy
if "$agent/python" -c "import tfprof.collector" 2>/dev/null; then
  echo "check_agent_install: the agent install brought in the collector" >&2
  exit 1
fi

trace="$root/tests/data/traces/kineto-hta/simple_add.json.gz"
expected=$("$full/python" -c "import sys
from tfprof.readers import load_trace
print(len(load_trace(sys.argv[1])))" "$trace")

"$full/tfprof-collector" serve --listen 127.0.0.1:0 --data-dir "$work/data" >"$work/serve.out" 2>&1 &
collector_pid=$!
for _ in $(seq 100); do
  grep -q "^listening on " "$work/serve.out" 2>/dev/null && break
  sleep 0.1
done
address=$(sed -n 's/^listening on //p' "$work/serve.out")
[ -n "$address" ] || { cat "$work/serve.out" >&2; exit 1; }

"$agent/tfprof-agent" run --collector "$address" --job agent-only --source "replay:$trace" \
  --replay-speed max -- "$agent/python" -c "print('job ran')"
kill "$collector_pid"
wait "$collector_pid" || true
collector_pid=

stored=$("$full/python" -c "import sys
from tfprof.collector.store import Store
print(sum(job.num_records for job in Store(sys.argv[1]).load_jobs(['agent-only'])))" "$work/data")
echo "check_agent_install: agent-only install delivered $stored of $expected records"
[ "$stored" = "$expected" ]
