#!/usr/bin/env bash
# Sets up, fetches the default model and runs loom on it (CPU when no GPU).
# Extra arguments go to `loom generate`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
model="$(scripts/fetch_model.sh qwen2.5-coder-0.5b)"
scripts/build.sh cpu loom >/dev/null
if [ $# -eq 0 ]; then set -- --chat --prompt "Write one sentence about Paris." --max-tokens 64; fi
exec build/cpu/loom generate --model "$model" "$@"
