#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine, fetches the default model (if missing),
# builds loom and serves it with the OpenAI-compatible API on 127.0.0.1:8000
# (CPU when no GPU is present). Extra arguments go to `loom serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
model="$(scripts/fetch_model.sh qwen2.5-coder-0.5b)"
# With the CUDA toolkit, the build carries the CUDA backend (for the visible
# GPU's architecture); `loom serve` uses the GPU when one is present, else the CPU.
preset=cpu
export PATH="$PATH:/usr/local/cuda/bin"
if command -v nvcc >/dev/null 2>&1; then preset=cuda; fi
scripts/build.sh "$preset" loom >/dev/null
exec "build/$preset/loom" serve --model "$model" "$@"
