#!/usr/bin/env bash
# Builds loom and the CUDA test programs for sm_90a on this machine (nvcc is
# enough, no GPU) and packs them, stripped, with the few shared libraries a GPU
# machine's image lacks (fmt, spdlog, RE2, PCRE2), into .devbin/prebuilt.tar.xz,
# with the wheels of jsonschema for the GPU image's Python 3.12 (the stage
# `structured` validates outputs with it; that image has no jsonschema).
# On the GPU machine: LOOM_PREBUILT=.devbin/prebuilt.tar.xz scripts/gpu/device_e2e.sh STAGE...
# runs the stages without building there.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/usr/local/cuda/bin" CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
exclude=$(git rev-parse --git-path info/exclude)  # a worktree's .git is a file
mkdir -p "$(dirname "$exclude")" .devbin
grep -qx "/.devbin/" "$exclude" 2>/dev/null || echo "/.devbin/" >> "$exclude"
[ -f third_party/xgrammar/cpp/grammar_compiler.cc ] ||
  { echo "prebuild: third_party/xgrammar missing (run scripts/setup.sh): loom would refuse structured output" >&2; exit 1; }
[ -f third_party/cutlass/include/cutlass/cutlass.h ] ||
  { echo "prebuild: third_party/cutlass missing (run scripts/setup.sh): no CUTLASS FP8 block-scaled GEMM" >&2; exit 1; }
# PREBUILD_TESTS="test_cuda_fp8 ...": only those test programs (each is ~10 MB;
# the device tool carries at most 64 MiB with the working tree).
tests=${PREBUILD_TESTS:-$(cd tests/cuda && ls test_*.cpp | sed 's/\.cpp$//' | tr '\n' ' ')}
cmake -S . -B build/prebuilt -DCMAKE_BUILD_TYPE=Release -DLOOM_CUDA=ON -DLOOM_CUDA_ARCHS=90a -DLOOM_MPI=OFF \
  > /dev/null
# shellcheck disable=SC2086
cmake --build build/prebuilt -j"$(nproc)" --target loom $tests bench_cuda_ops
stage=$(mktemp -d)
mkdir "$stage/libs"
cp build/prebuilt/loom "$stage/"
for t in $tests bench_cuda_ops; do cp "build/prebuilt/tests/$t" "$stage/"; done
strip "$stage"/loom "$stage"/test_* "$stage"/bench_cuda_ops
ldd "$stage/loom" | awk '/=> \// {print $3}' | grep -E "lib(fmt|spdlog|re2|pcre2-8|icuuc|icudata)\." | while read -r lib; do
  cp -L "$lib" "$stage/libs/"
done
mkdir "$stage/wheels"
pip download -q --only-binary :all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d "$stage/wheels" \
  "jsonschema[format-nongpl]==4.26.0" || echo "prebuild: no jsonschema wheels (stage structured needs them)" >&2
# The test programs read their fixtures from the source tree they were built in.
echo "$PWD" > "$stage/source_dir"
tar -cJf .devbin/prebuilt.tar.xz -C "$stage" .
rm -rf "$stage"
ls -la .devbin/prebuilt.tar.xz
