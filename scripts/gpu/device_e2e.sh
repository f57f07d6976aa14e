#!/usr/bin/env bash
# On the GPU machine (device tool), from the repo root with .cuda-deps carried:
# builds loom with CUDA, runs the CUDA tests, checks greedy tokens against HF
# transformers on a small random Llama-3 model, then benchmarks an 8B-shaped
# one. Results land in $OUT. Usage: scripts/gpu/device_e2e.sh [all|test|bench]
# The Debian packages the GPU image lacks come in .cuda-deps (scripts/gpu/fetch_device_debs.sh).
set -uo pipefail
what=${1:-all}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mkdir -p /tmp/loom-deps
for f in .cuda-deps/*.deb; do dpkg -x "$f" /tmp/loom-deps; done
D=/tmp/loom-deps/usr
export CMAKE_PREFIX_PATH=$D PKG_CONFIG_PATH=$D/lib/x86_64-linux-gnu/pkgconfig:$D/share/pkgconfig
export PKG_CONFIG_SYSROOT_DIR=/tmp/loom-deps CPATH=$D/include LIBRARY_PATH=$D/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$D/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
t0=$(date +%s)
cmake -S . -B build/gpu -DCMAKE_BUILD_TYPE=Release -DLOOM_CUDA=ON -DLOOM_CUDA_ARCHS=90a \
  > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build build/gpu -j"$(nproc)" --target loom test_cuda_model test_cuda_ops test_cuda_attention \
  test_cuda_matmul > "$OUT/build.log" 2>&1 || { grep -E "error" -A5 "$OUT/build.log" | head -60; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
L=build/gpu/loom
if [ "$what" != bench ]; then
  for t in test_cuda_model test_cuda_ops test_cuda_attention test_cuda_matmul; do
    timeout 300 build/gpu/tests/$t > "$OUT/$t.log" 2>&1; echo "$t rc=$? $(tail -1 "$OUT/$t.log")"
  done
  grep "worst" "$OUT/test_cuda_model.log" | sort -u | head -20
  python3 scripts/gpu/make_random_model.py --shape small --out /tmp/small > /dev/null || exit 1
  for s in 1 2 3; do
    ids=$(python3 -c "import random; r=random.Random($s); print(','.join(str(r.randrange(300, 128000)) for _ in range(17*$s)))")
    timeout 120 $L generate --device cuda --model /tmp/small --prompt-ids "$ids" --max-tokens 32 \
      --temperature 0 --ignore-eos --json > /tmp/loom_small_$s.json 2> "$OUT/gen_small_$s.err" || cat "$OUT/gen_small_$s.err"
  done
  timeout 300 python3 scripts/gpu/hf_compare.py --model /tmp/small /tmp/loom_small_{1,2,3}.json
fi
if [ "$what" != test ]; then
  t1=$(date +%s)
  python3 scripts/gpu/make_random_model.py --shape 8b --out /tmp/llama8b > /dev/null || exit 1
  echo "8b model written in $(( $(date +%s) - t1 )) s"
  ids=$(python3 -c "import random; r=random.Random(7); print(','.join(str(r.randrange(300, 128000)) for _ in range(40)))")
  timeout 200 $L generate --device cuda --model /tmp/llama8b --prompt-ids "$ids" --max-tokens 32 --temperature 0 \
    --ignore-eos --json > /tmp/loom_8b.json 2> "$OUT/gen_8b.err" || tail -5 "$OUT/gen_8b.err"
  timeout 240 python3 scripts/gpu/hf_compare.py --model /tmp/llama8b /tmp/loom_8b.json
  timeout 240 $L bench latency --device cuda --model /tmp/llama8b --input-len 128 --output-len 128 \
    --batch-sizes 1,64,256 --max-num-seqs 256 --json | tee "$OUT/bench_latency_8b.json"
  timeout 300 $L bench offline --device cuda --model /tmp/llama8b --dataset sharegpt --num-requests 1000 \
    --max-num-seqs 256 --max-num-batched-tokens 8192 --json | tee "$OUT/bench_offline_8b.json"
fi
