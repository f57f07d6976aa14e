#!/usr/bin/env bash
# Builds the CUDA tests and op benchmark on the GPU machine and runs them.
# Run from the repository root. When .cuda-deps/ holds .deb files (see
# fetch_device_debs.sh), they are unpacked under /tmp/loom-deps (never /) and
# used for configuring, building and running.
#   tests/cuda/device_build.sh [tests|bench|all]   (default all)
set -uo pipefail
what=${1:-all}
if compgen -G ".cuda-deps/*.deb" > /dev/null; then
  mkdir -p /tmp/loom-deps
  for f in .cuda-deps/*.deb; do dpkg -x "$f" /tmp/loom-deps; done
  export CMAKE_PREFIX_PATH=/tmp/loom-deps/usr
  export PKG_CONFIG_PATH=/tmp/loom-deps/usr/lib/x86_64-linux-gnu/pkgconfig
  export LD_LIBRARY_PATH=/tmp/loom-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
nvidia-smi -L || true
# LOOM_FULL=1: configure the whole project (needs every server dependency);
# else only the CUDA backend and its tests (tests/cuda/standalone).
if [ "${LOOM_FULL:-0}" = 1 ]; then src=.; extra="-DLOOM_CUDA=ON"; b=build/cuda-dev
else src=tests/cuda/standalone; extra=; b=build/cuda-sa; fi
cmake -S $src -B $b -DCMAKE_BUILD_TYPE=Release -DLOOM_CUDA_ARCHS=90a $extra \
  > /tmp/loom-configure.log 2>&1 || { tail -30 /tmp/loom-configure.log; exit 1; }
cmake --build $b -j"$(nproc)" --target test_cuda_ops test_cuda_matmul test_cuda_attention \
  bench_cuda_ops > /tmp/loom-build.log 2>&1 || { grep -E "error" -A5 /tmp/loom-build.log | head -60; exit 1; }
rc=0
if [ "$what" != bench ]; then
  for t in test_cuda_ops test_cuda_matmul test_cuda_attention; do
    bin=$b/tests/$t; [ -x $bin ] || bin=$b/$t
    timeout 300 $bin ${GTEST_ARGS:-} 2>&1 | tee "${OUT:-/tmp}/$t.log" | grep -vE "^\[ +(RUN|OK) +\]" || rc=1
  done
fi
if [ "$what" != tests ]; then
  bin=$b/tests/bench_cuda_ops; [ -x $bin ] || bin=$b/bench_cuda_ops
  timeout 300 $bin 20 2>&1 | tee "${OUT:-/tmp}/bench_cuda_ops.log" || rc=1
fi
exit $rc
