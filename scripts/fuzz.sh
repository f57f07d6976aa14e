#!/usr/bin/env bash
# Builds the libFuzzer harnesses for the model-file readers (preset `fuzz`,
# clang with libFuzzer + ASan/UBSan) and runs each for N seconds (default 30).
# Exits non-zero when a harness finds a crash; reproducers land in build/fuzz/.
# Usage: scripts/fuzz.sh [seconds]
set -euo pipefail
secs=${1:-30}
cd "$(dirname "$0")/.."

cmake --preset fuzz >/dev/null
cmake --build build/fuzz -j2 --target fuzz_gguf fuzz_safetensors fuzz_request make_fuzz_seeds

corpus=build/fuzz/corpus
mkdir -p "$corpus/gguf" "$corpus/safetensors" "$corpus/request"
build/fuzz/fuzz/make_fuzz_seeds "$corpus/gguf" "$corpus/safetensors"
cp tests/fixtures/loader/tiny.gguf "$corpus/gguf/ref_tiny.gguf"  # written by the gguf package
cp tests/fixtures/loader/tiny.safetensors "$corpus/safetensors/ref_tiny.safetensors"
cp fuzz/request_seeds/*.json "$corpus/request/"

# UB is fatal, so libFuzzer records it as a crash.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
status=0
for h in gguf safetensors request; do
  echo "== fuzz_$h for ${secs}s"
  build/fuzz/fuzz/fuzz_$h -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="build/fuzz/crash-$h-" "$corpus/$h" || status=1
done
exit $status
