#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine and runs every test: the release build's
# full suite (with the real default models), the unit tests again under
# ASan+UBSan, and a short libFuzzer run of each harness.
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_DIR="${CCACHE_DIR:-$PWD/.cache/ccache}"

scripts/setup.sh --test
scripts/fetch_model.sh qwen2.5-coder-0.5b >/dev/null
scripts/fetch_model.sh gemma3-270m >/dev/null

echo "== release build and tests"
scripts/build.sh cpu
ctest --preset cpu -j"$(nproc)" --timeout 900

echo "== ASan+UBSan unit tests"
scripts/build.sh debug-asan
ctest --preset debug-asan -j"$(nproc)" --timeout 900 -LE slow

if [ -x scripts/fuzz.sh ]; then
  echo "== fuzzing"
  scripts/fuzz.sh "${LOOM_FUZZ_SECONDS:-20}"
fi
