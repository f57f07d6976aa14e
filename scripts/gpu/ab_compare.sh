#!/usr/bin/env bash
# On the GPU machine: two loom builds side by side in one run, for a change
# that should not move performance. Each stage runs A, then B, then A and B
# again (interleaved, so drift of the machine shows as spread, not as a
# difference). Results land in $OUT/ab_<stage>.jsonl (one JSON row per run,
# tagged with the build) and a table is printed last.
#   scripts/gpu/ab_compare.sh A_LOOM B_LOOM [stages...]
# Stages: latency1 (8B shape, batch-1 decode, 128 in / 256 out), offline
# (8B, 1,000 ShareGPT-like requests at once), small (0.5B shape over HTTP,
# 128 in / 32 out, Poisson at $SMALL_RATES; the bench client is B's for both
# servers). Default: all three. The random-weight models are made by
# scripts/gpu/make_random_model.py (python3 with torch, on the machine).
set -uo pipefail
A=$1 B=$2
shift 2
stages=${*:-latency1 offline small}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
tag() { python3 -c "import json,sys; [print(json.dumps(dict(json.loads(l), build=sys.argv[1]))) for l in sys.stdin if l.strip().startswith('{')]" "$1"; }
model() {  # shape dir
  [ -d "$2" ] && return
  local t=$(date +%s)
  python3 scripts/gpu/make_random_model.py --shape "$1" --out "$2" > /dev/null || exit 1
  echo "model $1 written in $(( $(date +%s) - t )) s"
}
for stage in $stages; do
  out="$OUT/ab_$stage.jsonl"
  : > "$out"
  case $stage in
  latency1)
    model 8b /tmp/llama8b
    for run in A B A B; do
      bin=$A; [ $run = B ] && bin=$B
      timeout 120 "$bin" bench latency --device cuda --model /tmp/llama8b --input-len 128 --output-len 256 \
        --batch-sizes 1 --json 2> /tmp/ab_err.log | tag $run >> "$out" || tail -5 /tmp/ab_err.log
    done
    ;;
  offline)
    model 8b /tmp/llama8b
    "$B" bench workload --model /tmp/llama8b --dataset sharegpt --num-requests 1000 --seed 0 --output /tmp/w.jsonl
    for run in A B A B; do
      bin=$A; [ $run = B ] && bin=$B
      timeout 200 "$bin" bench offline --device cuda --model /tmp/llama8b --workload /tmp/w.jsonl \
        --max-num-seqs 256 --max-num-batched-tokens 8192 --json 2> /tmp/ab_err.log | grep -v "^|" | tag $run >> "$out" ||
        tail -5 /tmp/ab_err.log
    done
    ;;
  small)
    model 0.5b /tmp/qwen05
    for run in A B; do
      bin=$A; [ $run = B ] && bin=$B
      "$bin" serve --device cuda --model /tmp/qwen05 --port 18000 --max-num-seqs 512 --max-num-batched-tokens 16384 \
        > /tmp/serve_$run.log 2>&1 &
      spid=$!
      for i in $(seq 1 120); do curl -sf http://127.0.0.1:18000/ready > /dev/null && break; sleep 1; done
      timeout 300 "$B" bench serve --base-url http://127.0.0.1:18000 --model qwen05 --dataset fixed --input-len 128 \
        --output-len 32 --num-requests 3000 --warmup 50 --sweep "${SMALL_RATES:-1000,1500,2500}" \
        --token-id-range 300,100000 --server-pid $spid --output /tmp/small_$run.json > /tmp/small_$run.out 2>&1 ||
        tail -20 /tmp/small_$run.out
      kill -TERM $spid; wait $spid
      [ -f /tmp/small_$run.json ] && python3 -c "
import json,sys
d=json.load(open(sys.argv[1]))
for r in d['sweep']: print(json.dumps(dict(r, build=sys.argv[2])))" /tmp/small_$run.json $run >> "$out"
    done
    ;;
  esac
done
python3 - "$OUT" $stages <<'EOF'
import json, os, sys
out, stages = sys.argv[1], sys.argv[2:]
for s in stages:
    path = os.path.join(out, f"ab_{s}.jsonl")
    rows = [json.loads(l) for l in open(path) if l.strip()] if os.path.exists(path) else []
    print(f"== {s}")
    for r in rows:
        if s == "latency1":
            d = r["decode"][0]
            print(f"{r['build']}  ITL p50 {d['itl_ms']['p50']:.3f} ms  p99 {d['itl_ms']['p99']:.3f} ms  {d['decode_tokens_per_s']:.1f} tok/s")
        elif s == "offline":
            print(f"{r['build']}  {r['requests_per_s']:.2f} req/s  {r['output_tokens_per_s']:.0f} output tok/s  {r['duration_s']:.2f} s")
        else:
            print(f"{r['build']}  offered {r['request_rate']:>6}  {r['requests_per_s']:.0f} req/s  "
                  f"TTFT p50 {r['ttft_ms']['p50']:.1f} p99 {r['ttft_ms']['p99']:.1f} ms  errors {r['errors']}")
EOF
