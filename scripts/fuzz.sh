#!/usr/bin/env bash
# Builds the libFuzzer harnesses (preset `fuzz`, clang with libFuzzer +
# ASan/UBSan) for untrusted input - model files (GGUF, safetensors), request
# bodies, chat templates - and runs each one in turn.
#   scripts/fuzz.sh [SECONDS]          each harness SECONDS (default 30; what CI runs)
#   scripts/fuzz.sh --minutes N [H..]  scheduled mode: each harness (or only H..) N minutes
# The corpus persists in build/fuzz/corpus (seeds are added each run), so
# scheduled runs build on each other. Every harness prints one summary line
# (runs, time, runs/s, corpus size, crashes); reproducers land in
# build/fuzz/crash-<harness>-*. Exits non-zero when a harness finds a crash.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=30
if [ "${1:-}" = "--minutes" ]; then
  [ $# -ge 2 ] || { echo "usage: scripts/fuzz.sh --minutes N [harness...]" >&2; exit 2; }
  secs=$(( $2 * 60 ))
  shift 2
elif [ $# -gt 0 ]; then
  secs=$1
  shift
fi
all=(gguf safetensors request chat_template)
if [ $# -gt 0 ]; then harnesses=("$@"); else harnesses=("${all[@]}"); fi

cmake --preset fuzz >/dev/null
cmake --build build/fuzz -j2 --target make_fuzz_seeds $(printf 'fuzz_%s ' "${harnesses[@]}")

corpus=build/fuzz/corpus
mkdir -p "$corpus/gguf" "$corpus/safetensors" "$corpus/request" "$corpus/chat_template"
build/fuzz/fuzz/make_fuzz_seeds "$corpus/gguf" "$corpus/safetensors"
cp tests/fixtures/loader/tiny.gguf "$corpus/gguf/ref_tiny.gguf"  # written by the gguf package
cp tests/fixtures/loader/tiny.safetensors "$corpus/safetensors/ref_tiny.safetensors"
cp fuzz/request_seeds/*.json "$corpus/request/"
for t in tests/fixtures/jinja/templates/*.jinja; do  # real models' chat templates
  cp "$t" "$corpus/chat_template/seed_$(basename "$t")"
done

# UB is fatal, so libFuzzer records it as a crash.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
status=0
for h in "${harnesses[@]}"; do
  extra=()
  [ -f "fuzz/$h.dict" ] && extra+=(-dict="fuzz/$h.dict")
  [ "$h" = chat_template ] && extra+=(-dict=fuzz/jinja.dict)
  log="build/fuzz/fuzz_$h.log"
  echo "== fuzz_$h for ${secs}s"
  start=$(date +%s)
  rc=0
  build/fuzz/fuzz/fuzz_$h -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="build/fuzz/crash-$h-" "${extra[@]}" "$corpus/$h" \
    >"$log" 2>&1 || rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  elapsed=$(( $(date +%s) - start ))
  echo "fuzz_$h: ${runs:-?} runs in ${elapsed}s ($(( ${runs:-0} / (elapsed > 0 ? elapsed : 1) ))/s), corpus $(ls "$corpus/$h" | wc -l) files, exit $rc"
  if [ "$rc" -ne 0 ]; then
    status=1
    grep -m5 "ERROR\|Test unit written\|SUMMARY" "$log" || tail -20 "$log"
  fi
done
exit $status
