#!/usr/bin/env bash
# Install what the Spark test of the lake needs (tests/integration/test_lake_cluster.py):
# a Java runtime from the distribution's packages when `java` is missing, and pyspark
# into the given virtualenv. Idempotent: run it as often as you like.
#
#   scripts/install_spark.sh [VENV]      (default: .venv)
set -euo pipefail

VENV="${1:-.venv}"
PYSPARK_SPEC="${PYSPARK_SPEC:-pyspark>=3.5}"

if ! command -v java >/dev/null 2>&1; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "install_spark.sh: no java and no apt-get: install a Java 17+ runtime yourself" >&2
        exit 1
    fi
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q default-jre-headless
fi

if ! "$VENV/bin/python" -c "import pyspark" >/dev/null 2>&1; then
    "$VENV/bin/pip" install -q "$PYSPARK_SPEC"
fi
java -version 2>&1 | head -1
"$VENV/bin/python" -c "import pyspark; print('pyspark', pyspark.__version__)"
