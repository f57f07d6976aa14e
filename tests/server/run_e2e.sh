#!/usr/bin/env bash
# End-to-end tests of `loom serve` and `loom router` (tests/server, tests/router) against the real
# default model. Needs: pytest, requests, openai (scripts/requirements-test.txt)
# and models/qwen2.5-coder-0.5b-instruct.gguf (scripts/fetch_model.sh).
# Usage: tests/server/run_e2e.sh [path/to/loom] [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/../.."
export LOOM_BIN=${1:-${LOOM_BIN:-build/cpu/loom}}
shift || true
exec python3 -m pytest -q tests/server tests/router tests/bench "$@"
