#!/usr/bin/env bash
# Configures and builds one CMake preset (default: cpu). Usage: scripts/build.sh [PRESET] [TARGETS...]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-cpu}"; shift || true
# ccache hits across clones in other folders (CI clones afresh each run).
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-10G}"
# LOOM_CMAKE_ARGS: extra cache settings, e.g. -DLOOM_CUDA_ARCHS=90a
# shellcheck disable=SC2086
cmake --preset "$preset" ${LOOM_CMAKE_ARGS:-} >/dev/null
jobs="$(nproc)"
if [ $# -gt 0 ]; then
  cmake --build --preset "$preset" -j"$jobs" --target "$@"
else
  cmake --build --preset "$preset" -j"$jobs"
fi
