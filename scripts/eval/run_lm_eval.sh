#!/usr/bin/env bash
# Runs lm-evaluation-harness on the two tasks under tests/eval/tasks twice —
# `local-completions` against `loom serve` (tokenising through loom's
# /tokenize) and `hf` (transformers loading the same GGUF, dequantised to
# float32 on the CPU) — and prints both scores with their standard errors and
# the per-example agreement (scripts/eval/compare.py).
# Needs scripts/eval/requirements.txt. Nothing is downloaded: the tasks read
# the JSONL files under tests/eval/data.
# Usage: scripts/eval/run_lm_eval.sh [path/to/loom] [lm_eval args, e.g. --limit 20]
# LOOM_EVAL_MODEL (default models/qwen2.5-coder-0.5b-instruct.gguf),
# LOOM_EVAL_OUT (default build/eval: harness outputs and per-example samples),
# LOOM_EVAL_RESULTS (default tests/eval/results: the committed summaries; set
# it elsewhere for a trial run), LOOM_EVAL_ONLY=loom|hf (one side only).
set -euo pipefail
cd "$(dirname "$0")/../.."
loom=${1:-build/cpu/loom}
shift || true
model=${LOOM_EVAL_MODEL:-models/qwen2.5-coder-0.5b-instruct.gguf}
out=${LOOM_EVAL_OUT:-build/eval}
results=${LOOM_EVAL_RESULTS:-tests/eval/results}
only=${LOOM_EVAL_ONLY:-}
tasks=loom_mc,loom_gen
name=$(basename "$model" .gguf)
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$out" "$results"

harness() {  # harness SIDE MODEL_TYPE MODEL_ARGS BATCH_SIZE [extra...]
  local side=$1 type=$2 args=$3 batch=$4
  shift 4
  rm -rf "${out:?}/$side"
  local start=$SECONDS
  nice -n 5 python3 -m lm_eval --model "$type" --model_args "$args" \
    --include_path tests/eval/tasks --tasks "$tasks" --batch_size "$batch" --seed 1234 \
    --log_samples --output_path "$out/$side" "$@"
  echo "$side: $((SECONDS - start)) s"
}

if [ "$only" != hf ]; then
  log="$out/serve.log"
  nice -n 5 "$loom" serve --model "$model" --port 0 --max-model-len 2048 \
    --kv-cache-memory 512MiB --disable-log-requests >"$log" 2>&1 &
  server=$!
  trap 'kill "$server" 2>/dev/null || true' EXIT
  port=
  for _ in $(seq 1 240); do
    port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$log" | head -1)
    [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/ready" >/dev/null && break
    kill -0 "$server" 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.5
  done
  [ -n "$port" ] || { echo "loom serve did not start"; cat "$log"; exit 1; }
  # One prompt per request, four in flight (loom batches them).
  # tokenizer_backend=remote: the harness splits context and continuation
  # with loom's own tokenizer (/tokenizer_info, /tokenize, /detokenize).
  harness loom local-completions \
    "model=$name,base_url=http://127.0.0.1:$port/v1/completions,tokenizer_backend=remote,num_concurrent=4,max_length=2048,max_retries=1,timeout=600" 1 "$@"
  kill "$server"
  wait "$server" 2>/dev/null || true
  trap - EXIT
fi
if [ "$only" != loom ]; then
  # Batches of 8 (padded; the scores do not depend on it) to keep the CPU
  # run short.
  harness hf hf \
    "pretrained=$(cd "$(dirname "$model")" && pwd),gguf_file=$(basename "$model"),dtype=float32,max_length=2048" 8 --device cpu "$@"
fi
python3 scripts/eval/compare.py "$out" "$results" | tee "$results/summary.txt"
exit "${PIPESTATUS[0]}"
