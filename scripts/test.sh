#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine and runs every test: the release build's
# full suite (unit tests, HF-reference fixtures, the real default models),
# the server end to end through the official openai client and raw HTTP, the
# server's fault-injection suite, the unit tests again under ASan+UBSan, and
# a short libFuzzer run of each harness.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

scripts/setup.sh --test
# The Python test tooling setup.sh installed (.venv) before the system's.
export PATH="$PWD/.venv/bin:$PATH"
scripts/fetch_model.sh qwen2.5-coder-0.5b >/dev/null
scripts/fetch_model.sh gemma3-270m >/dev/null

echo "== release build and tests"
scripts/build.sh cpu
ctest --preset cpu -j2 --timeout 900

echo "== CUDA build (where nvcc exists; the CUDA tests skip without a GPU)"
export PATH="$PATH:/usr/local/cuda/bin"
if command -v nvcc >/dev/null 2>&1; then
  cuda_tests=$(cd tests/cuda && ls test_*.cpp | sed 's/\.cpp$//' | tr '\n' ' ')
  # shellcheck disable=SC2086
  LOOM_CMAKE_ARGS="-DLOOM_CUDA_ARCHS=${LOOM_CUDA_ARCHS:-90a}" scripts/build.sh cuda loom $cuda_tests
  for t in $cuda_tests; do build/cuda/tests/$t --gtest_brief=1; done
  build/cuda/loom env
else
  echo "no nvcc: CUDA build skipped"
fi

echo "== server end to end (openai client, raw HTTP)"
tests/server/run_e2e.sh build/cpu/loom --ignore=tests/server/test_faults.py

echo "== fault injection (disconnects at every event, SIGTERM under load, failing and stalled steps)"
LOOM_BIN=build/cpu/loom python3 -m pytest -q tests/server/test_faults.py
tests/bench/guidellm_smoke.sh build/cpu/loom

echo "== ASan+UBSan tests"
scripts/build.sh debug-asan
ctest --preset debug-asan -j2 --timeout 1200 -LE "slow|dist"
# The MPI tests without leak detection: OpenMPI's own allocations (its
# dlclosed components) are reported as leaks at exit; ASan's other checks stay on.
ASAN_OPTIONS=detect_leaks=0 ctest --preset debug-asan -j2 --timeout 1200 -L dist

echo "== fuzzing"
scripts/fuzz.sh "${LOOM_FUZZ_SECONDS:-20}"

echo "== all tests passed in $(( $(date +%s) - start )) s"
