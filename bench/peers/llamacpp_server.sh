#!/usr/bin/env bash
# loom vs llama.cpp, served: starts `loom serve` and then llama.cpp's server
# (`python -m llama_cpp.server` from the llama-cpp-python PyPI package) on the
# same GGUF with the same threads, runs `loom bench serve` against each with
# the same seeded workload (text prompts: llama-cpp-python takes no token-id
# prompts), and writes one JSON with both reports and the loom/peer ratios.
# The servers run one after the other, never side by side.
#
# Usage: bench/peers/llamacpp_server.sh [--model M.gguf] [--loom build/cpu/loom] [--threads 2]
#          [--num-requests 32] [--max-concurrency 4] [--input-len 128] [--output-len 32]
#          [--output bench/results/serve_llamacpp_cpu.json]
# Needs: pip install 'llama-cpp-python[server]' (fastapi, uvicorn, sse-starlette,
# starlette-context, pydantic-settings besides llama-cpp-python itself).
set -euo pipefail
cd "$(dirname "$0")/../.."

model=models/qwen2.5-coder-0.5b-instruct.gguf
loom=build/cpu/loom
threads=2
num_requests=32
concurrency=4
input_len=128
output_len=32
output=bench/results/serve_llamacpp_cpu.json
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --loom) loom=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --num-requests) num_requests=$2; shift 2 ;;
    --max-concurrency) concurrency=$2; shift 2 ;;
    --input-len) input_len=$2; shift 2 ;;
    --output-len) output_len=$2; shift 2 ;;
    --output) output=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

work=$(mktemp -d)
server_pid=""
stop_server() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}
trap 'stop_server; rm -rf "$work"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_ready() {  # URL PATH SECONDS
  for _ in $(seq "$3"); do
    if curl -sf "$1$2" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$server_pid" 2>/dev/null; then echo "server exited early" >&2; return 1; fi
    sleep 1
  done
  echo "server did not come up at $1" >&2
  return 1
}

bench() {  # LABEL URL OUT
  "$loom" bench serve --base-url "$2" --label "$1" --endpoint completions --prompt-format text \
    --dataset fixed --num-requests "$num_requests" --max-concurrency "$concurrency" \
    --input-len "$input_len" --output-len "$output_len" --warmup 2 --seed 0 \
    --server-pid "$server_pid" --timeout 900 --json --output "$3" >/dev/null
}

port=$(free_port)
echo "== loom serve on :$port" >&2
"$loom" serve --model "$model" --threads "$threads" --port "$port" --served-model-name model \
  >"$work/loom.log" 2>&1 &
server_pid=$!
wait_ready "http://127.0.0.1:$port" /health 120
bench loom "http://127.0.0.1:$port" "$work/loom.json"
stop_server

port=$(free_port)
echo "== llama.cpp (llama_cpp.server) on :$port" >&2
python3 -m llama_cpp.server --model "$model" --model_alias model --n_threads "$threads" \
  --n_threads_batch "$threads" --n_ctx 4096 --interrupt_requests False --host 127.0.0.1 --port "$port" \
  >"$work/peer.log" 2>&1 &
server_pid=$!
wait_ready "http://127.0.0.1:$port" /v1/models 180
bench llama.cpp "http://127.0.0.1:$port" "$work/peer.json"
stop_server

mkdir -p "$(dirname "$output")"
python3 - "$work/loom.json" "$work/peer.json" "$output" "$model" "$threads" <<'PY'
import json, subprocess, sys
loom, peer = (json.load(open(p)) for p in sys.argv[1:3])
out, model, threads = sys.argv[3], sys.argv[4], int(sys.argv[5])
try:
    import llama_cpp
    peer_version = llama_cpp.__version__
except Exception:
    peer_version = "unknown"
def get(r, path):
    for k in path.split("."):
        r = r[k]
    return r
# higher is better for rates, lower for latencies: ratio > 1 means loom is better on both kinds
rates = ["requests_per_s", "output_tokens_per_s", "input_tokens_per_s", "goodput.requests_per_s"]
lat = ["ttft_ms.p50", "ttft_ms.p99", "tpot_ms.p50", "tpot_ms.p99", "itl_ms.p50", "e2e_ms.p50", "e2e_ms.p99"]
ratios = {}
for k in rates:
    a, b = get(loom, k), get(peer, k)
    ratios[k + " (loom/peer)"] = round(a / b, 3) if b else None
for k in lat:
    a, b = get(loom, k), get(peer, k)
    ratios[k + " (peer/loom, >1: loom faster)"] = round(b / a, 3) if a else None
mem = [r.get("server", {}).get("process_peak_rss_mib") for r in (loom, peer)]
if all(mem):
    ratios["server peak RSS MiB (loom/peer)"] = round(mem[0] / mem[1], 3)
result = {
    "benchmark": "serve_vs_llamacpp",
    "machine": loom["machine"],
    "commit": loom["machine"]["commit"],
    "model": model,
    "threads": threads,
    "peer": {"name": "llama.cpp via llama-cpp-python server", "version": peer_version,
             "note": "one request at a time (the server holds a lock per completion; no parallel slots); "
                     "ignore_eos is not honoured, so outputs may end early: compare output_tokens"},
    "ratios": ratios,
    "loom": loom,
    "llama.cpp": peer,
}
json.dump(result, open(out, "w"), indent=2)
print(f"| metric | loom | llama.cpp | ratio |\n| --- | --- | --- | --- |")
for k in rates + lat + ["output_tokens", "input_tokens", "errors"]:
    a, b = get(loom, k), get(peer, k)
    rk = [r for r in ratios if r.startswith(k + " ")]
    print(f"| {k} | {a} | {b} | {ratios[rk[0]] if rk else ''} |")
print(f"| server peak RSS MiB | {mem[0]} | {mem[1]} | {ratios.get('server peak RSS MiB (loom/peer)', '')} |")
print(f"wrote {out}", file=sys.stderr)
PY
