#!/usr/bin/env bash
# The soak: `loom serve` on a model with two tenants (one limited to one
# request at a time) and `loom bench serve --soak-minutes M` against it: a
# mixed workload (streams, non-streams, mid-stream disconnects, bad requests,
# the limited tenant over its limit), one JSON line a minute (RSS, RssAnon,
# fds, KV blocks, latency percentiles), then the final report with the RSS
# slope after warm-up (memory.rss_mb_per_hour).
# Usage: scripts/soak.sh [MINUTES (60)] [OUT (bench/results/soak_cpu.jsonl)]
# Env: LOOM (build/cpu/loom), MODEL (models/qwen2.5-coder-0.5b-instruct.gguf),
#      PORT (0: any free port), CONCURRENCY (8), SERVE_ARGS (extra `loom serve` flags).
# The binary is copied first, so a rebuild during the run does not touch it.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-60}
out=${2:-bench/results/soak_cpu.jsonl}
loom=${LOOM:-build/cpu/loom}
model=${MODEL:-models/qwen2.5-coder-0.5b-instruct.gguf}
port=${PORT:-0}
dir=$(mktemp -d)
cp "$loom" "$dir/loom"
cat > "$dir/tenants.json" <<'EOF'
{"tenants": [{"name": "soak", "keys": ["soak-key"]},
             {"name": "limited", "keys": ["limited-key"], "max_concurrent": 1}]}
EOF
# shellcheck disable=SC2086
"$dir/loom" serve "$model" --port "$port" --api-key-file "$dir/tenants.json" \
  --disable-log-requests ${SERVE_ARGS:-} > "$dir/serve.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$dir"' EXIT
url=
for _ in $(seq 600); do
  url=$(grep -o "listening on http://[^ ]*" "$dir/serve.log" | cut -d' ' -f3 || true)
  [ -n "$url" ] && curl -sf "$url/ready" > /dev/null && break
  kill -0 "$server" 2>/dev/null || { cat "$dir/serve.log"; exit 1; }
  sleep 1
done
[ -n "$url" ] || { cat "$dir/serve.log"; exit 1; }
"$dir/loom" bench serve --base-url "$url" --soak-minutes "$minutes" \
  --max-concurrency "${CONCURRENCY:-8}" --server-pid "$server" --api-key soak-key \
  --limited-api-key limited-key > "$out"
kill -TERM "$server"
wait "$server"
echo "soak: server exit $?; $(tail -1 "$out" | python3 -c \
  'import json,sys; r=json.load(sys.stdin); m=r["memory"]; print("RSS slope", m["rss_mb_per_hour"], "MB/hour, RssAnon", m["rss_anon_mb_per_hour"])')"
