#!/usr/bin/env bash
# GuideLLM (a benchmark client nobody here wrote) against `loom serve` on the
# CPU: a handful of short synchronous requests; passes when GuideLLM finishes
# and reports every request successful and none errored. Offline: the
# tokenizer is the committed Qwen2-style fixture, the Hugging Face libraries
# are told to stay offline, and all other HTTP goes to a dead proxy (only
# localhost is exempt), so any attempt to reach the network fails the test.
# Usage: tests/bench/guidellm_smoke.sh [path/to/loom]   (needs: pip install guidellm)
set -euo pipefail
cd "$(dirname "$0")/../.."
loom=${1:-${LOOM_BIN:-build/cpu/loom}}
model=${LOOM_SMOKE_MODEL:-models/qwen2.5-coder-0.5b-instruct.gguf}
requests=${GUIDELLM_SMOKE_REQUESTS:-3}

work=$(mktemp -d)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$loom" serve --model "$model" --threads 2 --port "$port" --served-model-name smoke >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 120); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log"; echo "loom serve exited" >&2; exit 1; }
  sleep 1
done

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
export HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 http_proxy=http://127.0.0.1:9 \
  https_proxy=http://127.0.0.1:9 NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost
export HF_HOME="$work/hf"  # an empty cache: nothing downloaded earlier can stand in

timeout 240 guidellm run \
  --backend "kind=openai_http,target=http://127.0.0.1:$port,model=smoke,request_format=/v1/completions" \
  --profile kind=synchronous \
  --data kind=synthetic_text,prompt_tokens=32,output_tokens=8 \
  --constraint "kind=max_requests,count=$requests" \
  --tokenizer "kind=huggingface_auto,model=$PWD/tests/fixtures/tokenizer/qwen2" \
  --output "kind=json,path=$work/guidellm.json" \
  --disable-console-interactive >"$work/guidellm.log" 2>&1 || {
  tail -40 "$work/guidellm.log"
  echo "guidellm failed" >&2
  exit 1
}

python3 - "$work/guidellm.json" "$requests" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
want = int(sys.argv[2])
benchmarks = report.get("benchmarks") or []
assert benchmarks, "no benchmark in GuideLLM's report"
totals = benchmarks[0]["metrics"]["request_totals"]
print(f"guidellm against loom: {totals}")
assert totals.get("errored", 0) == 0, f"errored requests: {totals}"
assert totals.get("incomplete", 0) == 0, f"incomplete requests: {totals}"
assert totals.get("successful", 0) >= want, f"expected {want} successful requests: {totals}"
PY
echo "guidellm smoke test passed"
