#!/usr/bin/env bash
# On a GPU machine, from the repo root with .cuda-deps carried:
# builds loom with CUDA, then runs the stages named in the arguments (default:
# test bench). Results land in $OUT (few files: the device tool returns only a
# handful). The Debian packages the GPU image lacks come in .cuda-deps
# (scripts/gpu/fetch_device_debs.sh).
#   test     CUDA unit tests, greedy tokens vs HF on a small random Llama-3
#   latency  8B-shaped model: single-stream and batched decode, graphs on and off
#   longlat  8B: bench latency at 7,000 prompt tokens, batches 1, 16, 64 (decode rate each)
#   offline  8B: 1,000 ShareGPT-like requests at once (the first run with the step
#            profile), loom then HF's continuous batching on the first $HF_REQUESTS
#   fixed    8B: 512 requests of 1,000 prompt / 1,000 output tokens
#   goals    8B, bf16 then FP8 weights + KV in one call: batch 1 / 64 decode, 1,000
#            ShareGPT-like requests, 512 x 1000/1000 (GOALS_SEQS, GOALS_TOKENS)
#   profile  8B: CUPTI kernel profile of decode at batch 1 and 64 (PROFILE_BATCHES)
#   ops      bench_cuda_ops: per-op timings (GEMMs, attention decode/prefill, the
#            long-context decode table 8k-128k x batch 1-64, ...)
#   gemmhost bench_cuda_ops --gemm-host: host time of a bf16 and an FP8 matmul call at row
#            counts new to the backend and seen before (0.5B shapes)
#   readpat  bench_cuda_ops --read-pattern: DRAM read rate of the 8B weight shapes by
#            the tile a kernel fetches (R rows x seg contiguous bytes), blocks per SM
#            and loads in flight
#   attnsweep  bench_cuda_ops --attn-sweep: decode attention TB/s per LOOM_ATTN_*
#            setting (partition keys, blocks per SM, heads per block) and shape
#   small    0.5B-shaped model served over HTTP: 128 in / 32 out, Poisson arrivals
#            at rising rates (loom bench serve, on its own half of the cores:
#            taskset), p99 TTFT per rate, and per rate the
#            server's step profile and request stages (--profile-steps / --profile);
#            SMALL_RATES, SMALL_REQUESTS (3000 per rate), SMALL_TOKENS (the step's
#            token budget, 16384), SMALL_SEQS (--max-num-seqs and the recorded
#            decode steps' limit, 1024),
#            SMALL_SERVE_ARGS (extra `loom serve` flags, e.g. "--quantization fp8")
#   smallprof  0.5B shape: CUPTI kernel profile of an offline run of the small stage's
#            requests, bf16 then SMALLPROF_VARIANTS (e.g. "fp8,--quantization,fp8")
#   cpu      the host CPU as a second CPU data point: the 0.5B-shaped model (bf16
#            weights: the GGUF cannot be carried) on --device cpu, prefill at
#            32/128/512 prompt tokens and decode at 1/4/16/64 streams, at
#            CPU_THREADS (default: one per physical core), and at 2 threads
#            (32/128 tokens, up to 16 streams)
#   faults   the server's fault-injection suite against the CUDA build (0.5B-shaped model)
#   fp8test  FP8 op, model and engine tests (test_cuda_fp8, _fp8_kv, _fp8_fused, test_cuda_model,
#            test_cuda_engine)
#   fp8b1    the FP8 kernels for one or two rows: their test_cuda_fp8 cases, the
#            one-row GEMM table (small-m kernel, streaming kernel, cuBLASLt; the
#            streaming kernel also at each FP8_STREAM_CFGS chunk:blocks-per-SM), then
#            8B batch-1 decode (--quantization fp8 --kv-cache-dtype fp8) through each
#            (our small-m kernel, LOOM_FP8_SMALL_M=1; LOOM_FP8_STREAM=1; LOOM_FP8_SMALL_M=0: cuBLASLt) with
#            kernel profiles, in one call
#   fp8ncu   Nsight Compute on the one-row products: the FP8 small-m kernel at each
#            8B shape (per-row scales), the streaming kernel and the bf16 GEMV on gate_up,
#            one launch each (FP8NCU_SPECS: other kernels, "kernel skip name|...")
#            (speed of light, memory, warp stalls, occupancy), as ncu_fp8.txt
#   fp8block the CUTLASS block-scaled FP8 GEMM: its test_cuda_fp8 cases, then
#            bench_cuda_ops' prefill table (bf16 vs FP8 per-row vs FP8 blocks)
#   fp8small a small Llama-3 shape end to end: FP8 checkpoints of both formats and
#            --quantization fp8, FP8 KV cache, 16 prompts x 32 greedy tokens vs HF on
#            the dequantised weights and vs bf16
#   fp8acc   the same comparison on the 8B shape (HF fp8 128x128-block checkpoint)
#   fp8latency  8B batch-1 decode ITL: bf16, --quantization fp8, the FP8 block checkpoint
#   fp8fixed    8B 512 x 1000/1000: bf16 vs FP8 weights + FP8 KV cache (KV capacity too)
#   fp8offline  8B 1,000 ShareGPT-like requests: bf16 vs FP8 weights + FP8 KV cache
#   fp8rows  the per-row FP8 GEMM choices (LOOM_FP8_CUTLASS_ROWS_FROM, LOOM_FP8_ROW_SPLIT_ROWS):
#            their tests, GEMM tables, alone vs batched, then A B A B decode, offline and
#            512 x 1000/1000 with --quantization fp8 --kv-cache-dtype fp8 (fp8rowstest: the
#            tests and tables only; fp8rowsbench: the A B A B only, over FP8ROWS_VARIANTS of
#            cublaslt default split8 split16 cutlass)
#   attnncu  decode attention at offline-run sizes (bench_cuda_ops --decode-attn: 128-512
#            sequences x 1k-2k context, bf16 and FP8 KV, TB/s; blocks token first and
#            LOOM_ATTN_HEADS_FIRST 1 and 0 alternated; the same bytes over one kv
#            head, whose 16 slots per block are contiguous), then Nsight Compute on the
#            FP8 kernel at 512 x 1536 (speed of light, memory, warp stalls, occupancy,
#            instruction mix) -> attn_decode.txt, ncu_attn.txt
#   fp8envab one environment setting against another, 8B shape, FP8AB_FLAGS (default
#            "--quantization fp8 --kv-cache-dtype fp8"; "" for bf16): FP8AB_ENV (a variable,
#            e.g. LOOM_FP8_FAST_ACCUM) at each of FP8AB_VALUES
#            (default "0 1"), FP8AB_ROUNDS rounds (1): bench latency 128/256 at batch
#            FP8AB_BATCHES (1,64), then (FP8AB_OFFLINE=1) the 1,000 ShareGPT-like requests
#            and 512 x 1000/1000 at 512:16384 -> FP8AB_NAME.json (fp8_envab.json)
#   fp8fasttest  fast accumulation (LOOM_FP8_FAST_ACCUM): its test_cuda_fp8 case, the GEMM
#            tables (bench_cuda_ops --matmul) and alone vs batched with it on
#   offsweep 8B 1,000 ShareGPT-like requests, bf16 and FP8 (weights + KV), at each
#            --max-num-seqs:--max-num-batched-tokens pair of OFFSWEEP (default
#            512:16384 1024:16384 1024:32768), with the step profile
#   specprofile  0.5B shape drafting for itself vs plain at 64 requests, with the step profile
#   spec     8B speculative decoding at batch 1, 8, 64 (bench latency): plain; the
#            target as its own draft at k = 2, 4, 6 (acceptance ~100%: the
#            mechanism's ceiling, every proposal verified: policy "always", no batch
#            cap) and at k = 4 with the default (cost-aware) policy, which should
#            decline a draft as dear as the target; a random 0.5B-shaped draft
#            (acceptance ~0: the worst case, default policy); n-gram k = 4 and 8
#            (default policy)
#   api      the CUDA build's --version and /version, and /v1/messages and
#            /v1/responses (plain and streamed) on a 0.5B-shaped model on the GPU
#   structured  8B-shaped random model: every structured-output schema, regex and
#            choice at temperature 0 and 1 must validate (masks on the device), then
#            256 concurrent json_schema requests vs the same unconstrained
#            (loom bench serve --json-schema): tok/s, mask time, compile TTFT
#   jumpfwd  8 concurrent json_schema requests with and without jump-forward
#            (bench/jump_forward.py, two servers side by side)
#   coldstart  8B shape: loom serve to /ready and to the first token, page cache
#            warm and cold (bench/cold_start.py)
#   piecewise  steps other than recorded decodes run in recorded pieces (LOOM_PIECEWISE_STEPS=1):
#            test_cuda_model's piecewise test, then off/on A/B in one call: the 0.5B shape
#            over HTTP at PIECE_RATES (default 2500,3000,3500; the client on its own cores
#            with taskset) and the 8B shape offline (1,000 ShareGPT-like requests, bf16),
#            each with the step profile
#   embed    /v1/embeddings on the GPU: a random 0.5B-shaped Qwen2 (bf16), last-token
#            and mean (sentence-transformers modules.json) pooling, 24 prompts batched
#            and one by one vs HF transformers on the same weights (embed_check.py)
# Env: OFFLINE_REQUESTS (1000), HF_REQUESTS (256).
set -uo pipefail
stages=${*:-test latency}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
t0=$(date +%s)
tests=${TESTS:-$(for f in tests/cuda/test_*.cpp; do basename "$f" .cpp; done | tr '\n' ' ')}
if [ -n "${LOOM_PREBUILT:-}" ]; then
  # Binaries built elsewhere (scripts/gpu/prebuild.sh): a tarball of loom, the
  # CUDA test programs and the shared libraries the image lacks. Saves the
  # build's minutes of GPU-machine time.
  mkdir -p /tmp/prebuilt && tar -xJf "$LOOM_PREBUILT" -C /tmp/prebuilt || exit 1
  src=$(cat /tmp/prebuilt/source_dir)  # the test programs' fixture path
  [ -e "$src" ] || { mkdir -p "$(dirname "$src")" && ln -sfn "$PWD" "$src"; }
  export LD_LIBRARY_PATH=/tmp/prebuilt/libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  L=${LOOM_BIN:-/tmp/prebuilt/loom}  # LOOM_BIN: another loom binary (an A/B's other side)
  T=/tmp/prebuilt
else
  mkdir -p /tmp/loom-deps
  for f in .cuda-deps/*.deb; do dpkg -x "$f" /tmp/loom-deps; done
  D=/tmp/loom-deps/usr
  export CMAKE_PREFIX_PATH=$D PKG_CONFIG_PATH=$D/lib/x86_64-linux-gnu/pkgconfig:$D/share/pkgconfig
  export PKG_CONFIG_SYSROOT_DIR=/tmp/loom-deps CPATH=$D/include LIBRARY_PATH=$D/lib/x86_64-linux-gnu
  export LD_LIBRARY_PATH=$D/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  cmake -S . -B build/gpu -DCMAKE_BUILD_TYPE=Release -DLOOM_CUDA=ON -DLOOM_CUDA_ARCHS=90a \
    > /tmp/configure.log 2>&1 || { tail -30 /tmp/configure.log; exit 1; }
  cmake --build build/gpu -j"$(nproc)" --target loom $tests bench_cuda_ops > /tmp/build.log 2>&1 ||
    { grep -E "error" -A5 /tmp/build.log | head -60; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
  L=build/gpu/loom
  T=build/gpu/tests
fi
$L env
commit=$(cat .commit 2>/dev/null || echo unknown)
# HTTP runs: the server on the first half of the host's cores, the bench
# client on the other half, so that the client is not what limits the rate.
half=$(( $(nproc) / 2 ))
server_cpus="0-$((half - 1))" client_cpus="$half-$(( $(nproc) - 1 ))"
meta() { python3 - "$@" <<'EOF'
import json, sys, subprocess
path, what = sys.argv[1], sys.argv[2]
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
rows = [json.loads(l) for l in open(path) if l.strip().startswith("{")]
print(json.dumps({"what": what, "machine": gpu, "commit": open(".commit").read().strip() if __import__("os").path.exists(".commit") else "unknown", "results": rows}))
EOF
}
# tag_rows FILE LABEL [KEY=VALUE...]: FILE's JSON rows with the KEY=VALUE
# fields added (VALUE as an integer where it is one) on stdout, and for each
# a line on stderr, LABEL first: a latency run's (batch, ITL p50, decode
# tok/s), an offline run's req/s, output tok/s and duration.
tag_rows() {
  python3 - "$@" <<'PY'
import json, sys
path, label, tags = sys.argv[1], sys.argv[2], sys.argv[3:]
for l in open(path):
    if not l.startswith('{'): continue
    d = json.loads(l)
    for t in tags:
        k, v = t.split('=', 1)
        d[k] = int(v) if v.isdigit() else v
    print(json.dumps(d))
    if 'decode' in d: print(label, 'latency', [(e['batch'], e['itl_ms']['p50'], e['decode_tokens_per_s']) for e in d['decode']], 'kv_blocks', d.get('kv_blocks'), file=sys.stderr)
    else: print(label, 'offline', {k: d.get(k) for k in ('requests_per_s', 'output_tokens_per_s', 'duration_s')}, file=sys.stderr)
PY
}
# 16 greedy requests of random token ids (17..120 tokens), 32 tokens each,
# with top-5 logprobs, as `loom generate --batch-file` reads them.
fp8_requests() {
  python3 -c '
import json, random
r = random.Random(7)
for i in range(16):
    n = r.randrange(17, 121)
    print(json.dumps({"id": "p%d" % i, "prompt": [r.randrange(300, 120000) for _ in range(n)], "max_tokens": 32,
                      "temperature": 0, "logprobs": 5, "ignore_eos": True}))' > /tmp/fp8_req.jsonl
}
# fp8_generate NAME MODEL [flags...]: the requests through loom -> /tmp/b_NAME.jsonl
fp8_generate() {
  local name=$1 model=$2; shift 2
  timeout 240 $L generate --device cuda --model "$model" --batch-file /tmp/fp8_req.jsonl "$@" \
    > /tmp/b_$name.jsonl 2> /tmp/b_$name.err || { echo "generate $name failed:"; tail -5 /tmp/b_$name.err; }
}
model8b() {
  [ -d /tmp/llama8b ] && return
  local t1=$(date +%s)
  python3 scripts/gpu/make_random_model.py --shape 8b --out /tmp/llama8b > /dev/null || exit 1
  echo "8b model written in $(( $(date +%s) - t1 )) s"
}

for stage in $stages; do
  echo "=== $stage"
  case $stage in
  test)
    verdicts=""
    for t in $tests; do
      timeout 300 $T/$t > /tmp/$t.log 2>&1; v="$t rc=$? $(tail -1 /tmp/$t.log)"; echo "$v"
      verdicts+="$v"$'\n'
      grep -E "FAILED|Failure|Expected|Which is|worst|recorded vs|us per|ms per|tok/s" /tmp/$t.log | sort -u | head -40
    done
    # Every program's verdict again, last: the device tool returns only the
    # output's tail.
    printf "test programs:\n%s" "$verdicts"
    [ -n "${TESTS:-}" ] && continue  # a chosen subset: no end-to-end comparison
    python3 scripts/gpu/make_random_model.py --shape small --out /tmp/small > /dev/null || exit 1
    for s in 1 2 3; do
      ids=$(python3 -c "import random; r=random.Random($s); print(','.join(str(r.randrange(300, 128000)) for _ in range(17*$s)))")
      timeout 120 $L generate --device cuda --model /tmp/small --prompt-ids "$ids" --max-tokens 32 \
        --temperature 0 --ignore-eos --json > /tmp/loom_small_$s.json 2> /tmp/gen_small_$s.err || tail -5 /tmp/gen_small_$s.err
    done
    timeout 300 python3 scripts/gpu/hf_compare.py --model /tmp/small /tmp/loom_small_{1,2,3}.json | tail -4
    ;;
  latency)
    model8b
    timeout 240 $L bench latency --device cuda --model /tmp/llama8b --input-len 128 --output-len 128 \
      --batch-sizes 1,64,256 --max-num-seqs 256 --json > /tmp/lat.jsonl 2> /tmp/lat.err || tail -5 /tmp/lat.err
    timeout 120 $L bench latency --device cuda --model /tmp/llama8b --input-len 128 --output-len 64 \
      --batch-sizes 1 --max-num-seqs 256 --enforce-eager --json > /tmp/lat_eager.jsonl 2> /tmp/lat_eager.err || tail -5 /tmp/lat_eager.err
    timeout 120 $L bench latency --device cuda --model /tmp/llama8b --input-len 128 --output-len 128 \
      --batch-sizes 1,64 --max-num-seqs 256 --no-async-scheduling --json > /tmp/lat_sync.jsonl 2> /tmp/lat_sync.err || tail -5 /tmp/lat_sync.err
    cat /tmp/lat.jsonl /tmp/lat_eager.jsonl /tmp/lat_sync.jsonl | cut -c1-1500
    cat /tmp/lat.jsonl /tmp/lat_eager.jsonl /tmp/lat_sync.jsonl > /tmp/lat_all.jsonl
    meta /tmp/lat_all.jsonl "bench latency, Llama-3-8B shape, bf16 random weights (rows: graphs + async scheduling; --enforce-eager; --no-async-scheduling)" > "$OUT/bench_latency_8b.json"
    ;;
  longlat)
    # Long prompts: every batch size must get a real decode rate (its window
    # starts once the last prompt is prefilled; tokens_per_request says how
    # many tokens each request generated for that).
    model8b
    timeout 400 $L bench latency --device cuda --model /tmp/llama8b --input-len 7000 --output-len 64 \
      --batch-sizes 1,16,64 --max-num-seqs 256 --json > /tmp/longlat.jsonl 2> /tmp/longlat.err || tail -5 /tmp/longlat.err
    python3 -c "
import json
for l in open('/tmp/longlat.jsonl'):
    j = json.loads(l)
    print('ttft_ms', j['ttft_ms'], 'prefill tok/s', j['prefill_tokens_per_s'])
    for d in j['decode']:
        print('batch', d['batch'], 'decode tok/s', d['decode_tokens_per_s'], 'tokens/request', d['tokens_per_request'],
              'window', d['window'], 'tpot p50 ms', d['tpot_ms']['p50'])"
    meta /tmp/longlat.jsonl "bench latency, Llama-3-8B shape, bf16, 7000 prompt tokens, batches 1/16/64" > "$OUT/bench_latency_8b_7000.json"
    ;;
  offline)
    model8b
    n=${OFFLINE_REQUESTS:-1000}
    $L bench workload --model /tmp/llama8b --dataset sharegpt --num-requests "$n" --seed 0 --output /tmp/w.jsonl
    # --profile: the step profile (host phases, GPU span and idle gap per kind of step) in the JSON.
    timeout 400 $L bench offline --device cuda --model /tmp/llama8b --workload /tmp/w.jsonl --profile \
      --max-num-seqs 256 --max-num-batched-tokens 8192 --json > /tmp/off.jsonl 2> /tmp/off.err || tail -5 /tmp/off.err
    head -1 /tmp/off.jsonl > /tmp/off_profile.json && python3 scripts/gpu/print_step_profile.py /tmp/off_profile.json
    timeout 400 $L bench offline --device cuda --model /tmp/llama8b --workload /tmp/w.jsonl --temperature 0.8 \
      --top-p 0.95 --max-num-seqs 256 --max-num-batched-tokens 8192 --json >> /tmp/off.jsonl 2>> /tmp/off.err || tail -5 /tmp/off.err
    head -"${HF_REQUESTS:-256}" /tmp/w.jsonl > /tmp/w_hf.jsonl
    timeout 400 $L bench offline --device cuda --model /tmp/llama8b --workload /tmp/w_hf.jsonl \
      --max-num-seqs 256 --max-num-batched-tokens 8192 --json >> /tmp/off.jsonl 2>> /tmp/off.err || tail -5 /tmp/off.err
    timeout 500 python3 bench/peers/hf_continuous_batching.py --model /tmp/llama8b --workload /tmp/w_hf.jsonl \
      >> /tmp/off.jsonl 2> /tmp/hf.err || tail -20 /tmp/hf.err
    grep -v "^|" /tmp/off.jsonl | cut -c1-1500; grep "^|" /tmp/off.jsonl
    meta /tmp/off.jsonl "bench offline: loom on $n ShareGPT-like requests (greedy, then temperature 0.8 / top-p 0.95 sampled on the GPU); loom and HF continuous batching on the first ${HF_REQUESTS:-256} (greedy)" > "$OUT/bench_offline_8b.json"
    ;;
  fixed)
    model8b
    timeout 500 $L bench offline --device cuda --model /tmp/llama8b --dataset fixed --input-len 1000 --output-len 1000 \
      --num-requests 512 --max-num-seqs 256 --max-num-batched-tokens 8192 --json > /tmp/fixed.jsonl 2> /tmp/fixed.err || tail -5 /tmp/fixed.err
    cut -c1-1500 /tmp/fixed.jsonl
    meta /tmp/fixed.jsonl "bench offline: 512 requests, 1000 in / 1000 out, Llama-3-8B shape bf16" > "$OUT/bench_fixed_8b.json"
    ;;
  small)
    # A Qwen2.5-0.5B-shaped model, 128 in / 32 out, Poisson arrivals at
    # rising rates through `loom bench serve` (HTTP, streaming): p99 TTFT per rate.
    python3 scripts/gpu/make_random_model.py --shape 0.5b --out /tmp/qwen05 > /dev/null || exit 1
    taskset -c $server_cpus $L serve --device cuda --model /tmp/qwen05 --port 18000 --max-num-seqs ${SMALL_SEQS:-1024} \
      --max-cudagraph-capture-size ${SMALL_SEQS:-1024} --max-num-batched-tokens ${SMALL_TOKENS:-16384} \
      --profile-steps ${SMALL_SERVE_ARGS:-} > /tmp/serve_small.log 2>&1 &
    spid=$!
    for i in $(seq 1 120); do curl -sf http://127.0.0.1:18000/ready > /dev/null && break; sleep 1; done
    timeout 400 taskset -c $client_cpus $L bench serve --base-url http://127.0.0.1:18000 --model qwen05 --dataset fixed \
      --input-len 128 --output-len 32 --num-requests ${SMALL_REQUESTS:-3000} --warmup 50 --sweep ${SMALL_RATES:-250,500,1000,1500,2000} \
      --token-id-range 300,100000 --server-pid $spid --profile --output /tmp/small.json > /tmp/small.out 2>&1 || tail -20 /tmp/small.out
    tail -30 /tmp/small.out
    [ -f /tmp/small.json ] && python3 scripts/gpu/print_step_profile.py /tmp/small.json
    kill -TERM $spid; wait $spid
    [ -f /tmp/small.json ] && cp /tmp/small.json "$OUT/bench_serve_small.json"
    [ -f /tmp/small.png ] && cp /tmp/small.png "$OUT/bench_serve_small.png"
    ;;
  cpu)
    python3 scripts/gpu/make_random_model.py --shape 0.5b --out /tmp/qwen05 > /dev/null || exit 1
    $L env --json | python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin)['cpu']))"
    rm -f /tmp/cpu.jsonl
    # At 2 threads the 512-token prompts and 64 streams (33k prompt tokens of
    # a bf16 model) would take minutes: 32 and 128 tokens, up to 16 streams.
    for th in ${CPU_THREADS:-0} 2; do
      lens="32 128 512" batches=1,4,16,64
      [ "$th" = 2 ] && lens="32 128" batches=1,4,16
      for n in $lens; do
        timeout 300 $L bench latency --device cpu --threads $th --model /tmp/qwen05 --input-len $n --output-len 32 \
          --batch-sizes $batches --json >> /tmp/cpu.jsonl 2> /tmp/cpu.err || tail -5 /tmp/cpu.err
      done
    done
    python3 -c "
import json
for l in open('/tmp/cpu.jsonl'):
    j = json.loads(l)
    print(j['threads'], j['input_len'], 'prefill', j['prefill_tokens_per_s'], 'tok/s, ttft', j['ttft_ms'], 'ms, decode',
          {d['batch']: d['decode_tokens_per_s'] for d in j['decode']})"
    meta /tmp/cpu.jsonl cpu > "$OUT/bench_cpu_host_h200.json"
    ;;
  api)
    $L --version
    python3 scripts/gpu/make_random_model.py --shape 0.5b --out /tmp/qwen05 > /dev/null || exit 1
    $L serve /tmp/qwen05 --device cuda --port 18001 --served-model-name qwen05 --metrics-public \
      > /tmp/serve_api.log 2>&1 &
    spid=$!
    for i in $(seq 1 120); do curl -sf http://127.0.0.1:18001/ready > /dev/null && break; sleep 1; done
    curl -s http://127.0.0.1:18001/version; echo
    curl -s http://127.0.0.1:18001/v1/messages -H 'x-api-key: x' -H 'Content-Type: application/json' \
      -d '{"model": "qwen05", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}'; echo
    curl -sN http://127.0.0.1:18001/v1/messages -H 'Content-Type: application/json' \
      -d '{"model": "qwen05", "max_tokens": 4, "stream": true, "messages": [{"role": "user", "content": "hi"}]}' \
      | grep '^event:' | tr '\n' ' '; echo
    curl -s http://127.0.0.1:18001/v1/responses -H 'Content-Type: application/json' \
      -d '{"model": "qwen05", "max_output_tokens": 8, "input": "hi"}' | cut -c1-400; echo
    curl -sN http://127.0.0.1:18001/v1/responses -H 'Content-Type: application/json' \
      -d '{"model": "qwen05", "max_output_tokens": 4, "stream": true, "input": "hi"}' \
      | grep '^event:' | tr '\n' ' '; echo
    curl -s http://127.0.0.1:18001/metrics | grep -E '^(loom_build_info|process_resident_memory_bytes)'
    kill -TERM $spid; wait $spid
    ;;
  structured)
    # 8B-shaped random model: (1) every structured-output schema, regex and
    # choice at temperature 0 and 1 must validate (masks on the device,
    # whatever the weights); (2) 512 requests, 256 concurrent, 512 in / 512
    # out, unconstrained then under bench/schemas/records.json in one
    # `loom bench serve --json-schema` run: output tok/s of both, per-token
    # host mask time p50/p99, TTFT added by a cold and a warm grammar compile.
    # jsonschema comes as wheels in the prebuilt tarball (or from python3).
    pylib=/tmp/structured_py
    if ! python3 -c "import jsonschema" 2> /dev/null; then
      [ -d "${T:-}/wheels" ] || { echo "structured: no jsonschema here and no wheels in the prebuilt tarball"; continue; }
      mkdir -p $pylib && python3 -c "import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]" $pylib "$T"/wheels/*.whl
    fi
    model8b
    $L serve --device cuda --model /tmp/llama8b --port 18002 --served-model-name llama8b --max-num-seqs 256 \
      --max-num-batched-tokens 8192 --max-grammar-compile-ms 60000 > /tmp/serve_structured.log 2>&1 &
    spid=$!
    for i in $(seq 1 240); do curl -sf http://127.0.0.1:18002/ready > /dev/null && break; sleep 1; done
    grep -q "structured output on" /tmp/serve_structured.log || { echo "structured: this loom has no xgrammar"; grep "structured output" /tmp/serve_structured.log; }
    PYTHONPATH=$pylib timeout 200 python3 scripts/gpu/structured_check.py http://127.0.0.1:18002 llama8b 8 > /tmp/structured.json
    echo "validity rc=$?"; cut -c1-1500 /tmp/structured.json
    timeout 330 $L bench serve --base-url http://127.0.0.1:18002 --model llama8b --dataset fixed --input-len 512 \
      --output-len 512 --num-requests 512 --max-concurrency 256 --token-id-range 300,100000 --warmup 4 \
      --json-schema bench/schemas/records.json --compile-probes 8 --server-pid $spid \
      --output /tmp/structured_bench.json > /tmp/structured_bench.out 2>&1 || tail -20 /tmp/structured_bench.out
    grep -v '^{' /tmp/structured_bench.out | tail -12
    curl -s http://127.0.0.1:18002/metrics | grep -E "^loom_grammar_(compiles|cache_hits|compile_timeouts)|^loom_engine_masked_rows"
    kill -TERM $spid; wait $spid
    cp /tmp/structured.json "$OUT/structured_validity_8b.json"
    [ -f /tmp/structured_bench.json ] && cp /tmp/structured_bench.json "$OUT/bench_structured_8b.json"
    ;;
  jumpfwd)
    model8b
    # Jump-forward with and without, same run (bench/jump_forward.py: two
    # servers side by side, 0.4 of the GPU each (the second's 0.8 counts the first's), the second --no-jump-forward),
    # 8 concurrent requests (jump-forward proposes while at most
    # --speculative-max-batch, 16, sequences decode): output tok/s and E2E of
    # the json_schema part, engine steps, forced tokens verified / accepted.
    # The random model's tokenizer has only byte tokens, so a forced string has
    # one spelling and every forced token is accepted; how many are proposed is
    # the policy's choice (it weighs a verify step's cost against the tokens won).
    timeout 480 python3 bench/jump_forward.py --loom $L --model /tmp/llama8b \
      --schema bench/schemas/orders.json --schema bench/schemas/records.json \
      --server-args "--device cuda --gpu-memory-utilization 0.4 --max-num-seqs 64" \
      --second-server-args "--device cuda --gpu-memory-utilization 0.8 --max-num-seqs 64" \
      --bench-args "--dataset fixed --input-len 512 --output-len 256 --num-requests 64 --max-concurrency 8 --token-id-range 300,100000 --warmup 2" \
      --repeats 2 --output /tmp/jump_forward.json > /tmp/jump_forward.out 2>&1
    echo "jump-forward rc=$?"; grep -A6 '"ratio_jump_forward_over_without"' /tmp/jump_forward.out
    [ -f /tmp/jump_forward.json ] && cp /tmp/jump_forward.json "$OUT/bench_jump_forward_8b.json"
    ;;
  coldstart)
    # loom serve to /ready and to a first request's first token, 8B shape,
    # page cache warm and cold (the model's files dropped from it with
    # posix_fadvise; fincore reports what stayed: a tmpfs /tmp cannot drop).
    model8b
    df -h /tmp | tail -1
    timeout 500 python3 bench/cold_start.py --loom $L --model /tmp/llama8b --server-args "--device cuda" \
      --repeats 2 --output /tmp/cold_start.json > /tmp/cold_start.out 2>&1
    echo "cold_start rc=$?"; tail -6 /tmp/cold_start.out
    grep -o '"page_cached_bytes_at_start": [0-9a-z]*' /tmp/cold_start.json | sort | uniq -c
    [ -f /tmp/cold_start.json ] && cp /tmp/cold_start.json "$OUT/cold_start_8b.json"
    ;;
  embed)
    timeout 900 python3 scripts/gpu/embed_check.py --loom "$L" --out "$OUT/embed_check.json"
    echo "embed rc=$?"
    ;;
  specprofile)
    # Where a speculative step's time goes: the 0.5B shape drafting for itself
    # (policy always) vs plain, 64 requests of 128 in / 128 out, step profile.
    [ -d /tmp/qwen05 ] || python3 scripts/gpu/make_random_model.py --shape 0.5b --out /tmp/qwen05 > /dev/null || exit 1
    for v in "plain" "self2 --speculative-model /tmp/qwen05 --num-speculative-tokens 2 --speculative-max-batch 0 --speculative-config {\"policy\":\"always\"}"; do
      set -- $v; name=$1; shift
      timeout 200 $L bench offline --device cuda --model /tmp/qwen05 --dataset fixed --input-len 128 --output-len 128 \
        --num-requests ${SPEC_REQUESTS:-64} --max-num-seqs 64 --profile --json "$@" > /tmp/sp_$name.json 2> /tmp/sp_$name.err ||
        tail -5 /tmp/sp_$name.err
      echo "-- $name"; head -1 /tmp/sp_$name.json | cut -c1-600
      head -1 /tmp/sp_$name.json > /tmp/sp_${name}_1.json && python3 scripts/gpu/print_step_profile.py /tmp/sp_${name}_1.json
    done
    ;;
  spec)
    model8b
    [ -d /tmp/draft05 ] || python3 scripts/gpu/make_random_model.py --shape 0.5b-draft --seed 1 --out /tmp/draft05 > /dev/null
    : > /tmp/spec.jsonl
    always='{"policy":"always"}'
    for v in "plain" "self2 --speculative-model /tmp/llama8b --num-speculative-tokens 2 --speculative-max-batch 0 --speculative-config $always" \
             "self4 --speculative-model /tmp/llama8b --num-speculative-tokens 4 --speculative-max-batch 0 --speculative-config $always" \
             "self6 --speculative-model /tmp/llama8b --num-speculative-tokens 6 --speculative-max-batch 0 --speculative-config $always" \
             "self4adaptive --speculative-model /tmp/llama8b --num-speculative-tokens 4" \
             "random4 --speculative-model /tmp/draft05 --num-speculative-tokens 4" \
             "ngram4 --speculative-method ngram --num-speculative-tokens 4" \
             "ngram8 --speculative-method ngram --num-speculative-tokens 8"; do
      set -- $v; name=$1; shift
      timeout 150 $L bench latency --device cuda --model /tmp/llama8b --input-len 128 --output-len 128 \
        --batch-sizes 1,8,64 --max-num-seqs 64 --json "$@" > /tmp/spec_$name.jsonl 2> /tmp/spec_$name.err ||
        tail -5 /tmp/spec_$name.err
      echo "-- $name"; cut -c1-900 /tmp/spec_$name.jsonl
      python3 -c "import json,sys; [print(json.dumps({'run': sys.argv[1], **json.loads(l)})) for l in open(sys.argv[2]) if l.startswith('{')]" \
        "$name" /tmp/spec_$name.jsonl >> /tmp/spec.jsonl
    done
    # Each run's decode tok/s against plain's, per batch size.
    python3 -c "
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
plain = {d['batch']: d['decode_tokens_per_s'] for r in runs if r['run'] == 'plain' for d in r['decode']}
for r in runs:
    print(r['run'].ljust(14), '  '.join('b%d %.1f tok/s %.3fx acc %.2f' % (d['batch'], d['decode_tokens_per_s'],
          d['decode_tokens_per_s'] / plain[d['batch']] if plain.get(d['batch']) else 0.0,
          d.get('speculative', {}).get('acceptance_rate', 0.0)) for d in r['decode']))
" /tmp/spec.jsonl
    meta /tmp/spec.jsonl "bench latency, Llama-3-8B shape bf16 random weights, 128 in / 128 out, batch 1/8/64: plain; the target as its own draft (k 2/4/6, policy always, --speculative-max-batch 0; k 4 with the default cost-aware policy); a random 0.5B-shaped draft (k 4, default policy); n-gram (k 4 and 8, default policy)" > "$OUT/bench_spec_8b.json"
    ;;
  latency1)
    model8b
    timeout 120 $L bench latency --device cuda --model /tmp/llama8b --input-len 128 --output-len 256 \
      --batch-sizes 1 --json > /tmp/lat1.jsonl 2> /tmp/lat1.err || tail -5 /tmp/lat1.err
    cut -c1-800 /tmp/lat1.jsonl
    meta /tmp/lat1.jsonl "bench latency batch 1, Llama-3-8B shape, bf16 random weights" > "$OUT/bench_latency1_8b.json"
    ;;
  offline512)
    # The 1,000-request workload with up to 512 running sequences and 16k-token steps.
    model8b
    $L bench workload --model /tmp/llama8b --dataset sharegpt --num-requests 1000 --seed 0 --output /tmp/w.jsonl
    timeout 300 $L bench offline --device cuda --model /tmp/llama8b --workload /tmp/w.jsonl \
      --max-num-seqs 512 --max-num-batched-tokens 16384 --json > /tmp/off512.jsonl 2> /tmp/off512.err || tail -5 /tmp/off512.err
    grep -v "^|" /tmp/off512.jsonl | cut -c1-1800
    meta /tmp/off512.jsonl "bench offline: 1,000 ShareGPT-like requests, --max-num-seqs 512 --max-num-batched-tokens 16384 (greedy)" > "$OUT/bench_offline512_8b.json"
    ;;
  profile)
    # Kernel-level profile (CUPTI, scripts/gpu/kernel_profile.sh) of single-stream
    # and batch-64 decode: GPU busy time per step vs wall time, top kernels.
    # PROFILE_ARGS: extra flags (e.g. "--quantization fp8 --kv-cache-dtype fp8"),
    # PROFILE_NAME: a tag in the output names.
    model8b
    for b in ${PROFILE_BATCHES:-1 64}; do
      timeout 200 scripts/gpu/kernel_profile.sh --step-kernel embedding_kernel --top 30 \
        --out "$OUT/profile${PROFILE_NAME:+_$PROFILE_NAME}_b$b" -- \
        $L bench latency --device cuda --model /tmp/llama8b --input-len 128 --output-len 512 --batch-sizes $b \
        --max-num-seqs 256 --json ${PROFILE_ARGS:-} > /tmp/prof_$b.jsonl 2> /tmp/prof_$b.err || tail -5 /tmp/prof_$b.err
      grep -A45 "kernels by" /tmp/prof_$b.err | head -60; grep -iE "step|busy|idle" /tmp/prof_$b.err | head -20
    done
    ;;
  smallprof)
    # Kernel profile (CUPTI) of the 0.5B shape's offline run of the `small`
    # stage's requests (128 in / 32 out, SMALLPROF_REQUESTS (4000) at once,
    # 512:16384): where prefill+decode steps spend the GPU's time, bf16 then
    # each of SMALLPROF_VARIANTS' flags ("fp8 --quantization fp8").
    python3 scripts/gpu/make_random_model.py --shape 0.5b --out /tmp/qwen05 > /dev/null || exit 1
    for v in "bf16" ${SMALLPROF_VARIANTS:-}; do
      set -- ${v//,/ }; name=$1; shift
      timeout 150 scripts/gpu/kernel_profile.sh --step-kernel embedding_kernel --top 25 \
        --out "$OUT/profile_small_$name" -- $L bench offline --device cuda --model /tmp/qwen05 --dataset fixed \
        --input-len 128 --output-len 32 --num-requests ${SMALLPROF_REQUESTS:-4000} --max-num-seqs 512 \
        --max-num-batched-tokens 16384 --profile --json "$@" > /tmp/sp_$name.jsonl 2> /tmp/sp_$name.err ||
        tail -5 /tmp/sp_$name.err
      echo "-- $name"; grep -A32 "kernels by\|total_ms" /tmp/sp_$name.err | head -34; grep -iE "busy|idle" /tmp/sp_$name.err | head -6
      head -1 /tmp/sp_$name.jsonl > /tmp/sp_$name.json && python3 scripts/gpu/print_step_profile.py /tmp/sp_$name.json | head -12
      cp /tmp/sp_$name.jsonl "$OUT/bench_offline_small_$name.jsonl"
    done
    ;;
  faults)
    # The server's fault-injection suite (tests/server/test_faults.py) on the
    # CUDA build: disconnects at every SSE event, SIGTERM under load, a
    # backend step that throws, a stalled engine. Needs pytest and requests.
    [ -d /tmp/qwen05 ] || python3 scripts/gpu/make_random_model.py --shape 0.5b --out /tmp/qwen05 > /dev/null || exit 1
    LOOM_BIN=$L LOOM_TEST_MODEL=/tmp/qwen05 timeout 900 python3 -m pytest -q tests/server/test_faults.py 2>&1 | tail -30
    ;;
  ops)
    timeout 300 $T/bench_cuda_ops > /tmp/ops.log 2>&1; echo "bench_cuda_ops rc=$?"
    sed -n '/^== paged attention/,/^$/p; /^== long-context decode/,/^$/p' /tmp/ops.log
    cat /tmp/ops.log | tail -60; cp /tmp/ops.log "$OUT/bench_cuda_ops.txt"
    ;;
  gemmhost)
    timeout 120 $T/bench_cuda_ops --gemm-host > /tmp/gemmhost.log 2>&1; echo "bench_cuda_ops --gemm-host rc=$?"
    cat /tmp/gemmhost.log; cp /tmp/gemmhost.log "$OUT/gemm_host.txt"
    ;;
  readpat)
    timeout 200 $T/bench_cuda_ops --read-pattern > /tmp/readpat.log 2>&1; echo "bench_cuda_ops --read-pattern rc=$?"
    cat /tmp/readpat.log; cp /tmp/readpat.log "$OUT/read_pattern.txt"
    ;;
  attnsweep)
    # The decode attention split's knobs (LOOM_ATTN_*) swept over long-context
    # shapes: TB/s per setting and shape, then the best setting per shape.
    timeout 400 $T/bench_cuda_ops --attn-sweep ${ATTN_SWEEP_ITERS:-10} > /tmp/attnsweep.log 2>&1
    echo "bench_cuda_ops --attn-sweep rc=$?"
    cat /tmp/attnsweep.log; cp /tmp/attnsweep.log "$OUT/attnsweep.txt"
    ;;
  fp8block)
    timeout 300 $T/test_cuda_fp8 --gtest_filter='*Cutlass*:*LinearMatches*:*RowsIndependent*' \
      > /tmp/fp8block.log 2>&1; echo "test_cuda_fp8 (block GEMM cases) rc=$? $(tail -1 /tmp/fp8block.log)"
    grep -E "FAILED|Failure|Expected|Which is|worst|cutlass|SKIPPED|calls|differ" /tmp/fp8block.log | head -40
    timeout 300 $T/bench_cuda_ops > /tmp/ops.log 2>&1; echo "bench_cuda_ops rc=$?"
    sed -n '/== prefill GEMMs/,/^$/p' /tmp/ops.log
    cat /tmp/fp8block.log /tmp/ops.log > "$OUT/fp8block.log"
    ;;
  fp8test)
    : > "$OUT/fp8test.log"
    for t in test_cuda_fp8 test_cuda_fp8_kv test_cuda_fp8_fused test_cuda_model test_cuda_engine; do
      timeout 400 $T/$t > /tmp/$t.log 2>&1; echo "$t rc=$? $(tail -1 /tmp/$t.log)"
      grep -E "FAILED|Failure|Expected|Which is|worst|identical|has none|recorded vs" /tmp/$t.log |
        sort -u | head -50
      cat /tmp/$t.log >> "$OUT/fp8test.log"
    done
    ;;
  fp8b1)
    timeout 200 $T/test_cuda_fp8 --gtest_filter='*LinearMatches*:*SmallMRowScales*:*RowsIndependent*:*StreamConfigs*' \
      > /tmp/fp8b1.log 2>&1; echo "test_cuda_fp8 (one- and two-row cases) rc=$? $(tail -1 /tmp/fp8b1.log)"
    grep -E "FAILED|Failure|Expected|Which is|worst|calls" /tmp/fp8b1.log | head -20
    timeout 120 $T/bench_cuda_ops --matmul > /tmp/mm.log 2>&1; echo "bench_cuda_ops --matmul rc=$?"
    awk '/FP8 E4M3/{f=1} f' /tmp/mm.log | grep -E "^(qkv|o|gate_up|down) +(kernel|stream|cublaslt) +[12] "
    cat /tmp/fp8b1.log /tmp/mm.log > "$OUT/fp8b1_ops.log"
    # The streaming kernel's shapes: bytes of k per stage and row, blocks per SM.
    for cfg in ${FP8_STREAM_CFGS:-2048:1 1024:1 1024:2 512:2}; do
      LOOM_FP8_STREAM_CHUNK=${cfg%:*} LOOM_FP8_STREAM_BLOCKS=${cfg#*:} timeout 120 $T/bench_cuda_ops --matmul \
        > /tmp/mm_$cfg.log 2>&1; echo "-- stream chunk ${cfg%:*}, ${cfg#*:} block(s) per SM: rc=$?"
      awk '/FP8 E4M3/{f=1} f' /tmp/mm_$cfg.log | grep -E "^(qkv|o|gate_up|down) +stream +1 "
      cat /tmp/mm_$cfg.log >> "$OUT/fp8b1_ops.log"
    done
    model8b
    : > /tmp/fp8b1.jsonl
    for v in "kernel LOOM_FP8_SMALL_M=1" "stream LOOM_FP8_STREAM=1" "cublaslt LOOM_FP8_SMALL_M=0"; do
      set -- $v; name=$1; shift
      env "$@" timeout 200 scripts/gpu/kernel_profile.sh --step-kernel embedding_kernel --top 12 \
        --out "$OUT/profile_fp8b1_$name" -- \
        $L bench latency --device cuda --model /tmp/llama8b --input-len 128 --output-len 512 --batch-sizes 1 \
        --quantization fp8 --kv-cache-dtype fp8 --json > /tmp/b1_$name.jsonl 2> /tmp/b1_$name.err ||
        tail -5 /tmp/b1_$name.err
      echo "-- $name"; grep -E "fp8_|nvjet|GPU busy  " /tmp/b1_$name.err | head -6
      python3 -c "import json,sys; [print([(e['batch'], e['decode_tokens_per_s'], e['itl_ms']['p50']) for e in json.loads(l)['decode']]) for l in open(sys.argv[1]) if l.startswith('{')]" /tmp/b1_$name.jsonl
      cat /tmp/b1_$name.jsonl >> /tmp/fp8b1.jsonl
    done
    meta /tmp/fp8b1.jsonl "bench latency --input-len 128 --output-len 512 --batch-sizes 1 --quantization fp8 --kv-cache-dtype fp8, Llama-3-8B shape: the FP8 small-m kernel, the streaming kernel, cuBLASLt" > "$OUT/bench_latency_8b_fp8b1.json"
    ;;
  fp8ncu)
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    [ -n "$ncu" ] || { echo "no ncu"; continue; }
    # bench_cuda_ops --matmul 20 runs each shape 23 times (3 warm-up): the
    # FP8 per-row table at one row is qkv, o, gate_up, down in that order, as is
    # the bf16 table's (its one-row products run gemv_kernel).
    : > "$OUT/ncu_fp8.txt"
    # FP8NCU_SPECS: "kernel launch-skip name" entries separated by |.
    specs=${FP8NCU_SPECS:-"fp8_matmul_kernel 10 qkv|fp8_matmul_kernel 33 o|fp8_matmul_kernel 56 gate_up|fp8_matmul_kernel 79 down|fp8_stream_kernel 56 gate_up_stream|gemv_kernel 56 gate_up_bf16"}
    IFS='|' read -ra speclist <<< "$specs"
    for spec in "${speclist[@]}"; do
      set -- $spec
      echo "== $3 ($1, launch $2)" >> "$OUT/ncu_fp8.txt"
      timeout 150 "$ncu" --clock-control none -k "regex:$1" --launch-skip "$2" --launch-count 1 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
        --section Occupancy --section SchedulerStats --section LaunchStats \
        $T/bench_cuda_ops --matmul 20 2>&1 | sed -n '/==PROF==/,$p' | grep -v "^ *---" >> "$OUT/ncu_fp8.txt"
      echo "ncu $3 rc=${PIPESTATUS[0]}"
    done
    grep -E "^== |Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued" "$OUT/ncu_fp8.txt" | head -60
    ;;
  fp8small)
    python3 scripts/gpu/make_random_model.py --shape small --out /tmp/small > /dev/null || exit 1
    for scheme in fp8-block ct-channel; do
      python3 scripts/gpu/make_fp8_model.py --src /tmp/small --scheme $scheme --out /tmp/small_$scheme | tail -1
    done
    fp8_requests
    fp8_generate small_bf16 /tmp/small
    fp8_generate small_fp8-block /tmp/small_fp8-block --kv-cache-dtype fp8
    fp8_generate small_ct-channel /tmp/small_ct-channel --kv-cache-dtype fp8
    fp8_generate small_online /tmp/small --quantization fp8 --kv-cache-dtype fp8
    for scheme in fp8-block ct-channel; do
      echo "-- small $scheme (FP8 weights + FP8 KV) vs HF on the dequantised weights, and vs loom bf16"
      timeout 300 python3 scripts/gpu/hf_compare.py --model /tmp/small_$scheme --dequantize-fp8 \
        --requests /tmp/fp8_req.jsonl --batch /tmp/b_small_$scheme.jsonl --bf16-batch /tmp/b_small_bf16.jsonl | tail -1
    done
    echo "-- small --quantization fp8 + FP8 KV vs HF on the bf16 weights, and vs loom bf16"
    timeout 300 python3 scripts/gpu/hf_compare.py --model /tmp/small --requests /tmp/fp8_req.jsonl \
      --batch /tmp/b_small_online.jsonl --bf16-batch /tmp/b_small_bf16.jsonl | tail -1
    ;;
  fp8acc)
    model8b
    [ -d /tmp/llama8b_fp8-block ] ||
      python3 scripts/gpu/make_fp8_model.py --src /tmp/llama8b --scheme fp8-block --out /tmp/llama8b_fp8-block | tail -1
    fp8_requests
    fp8_generate 8b_bf16 /tmp/llama8b
    fp8_generate 8b_fp8-block /tmp/llama8b_fp8-block --kv-cache-dtype fp8
    fp8_generate 8b_online /tmp/llama8b --quantization fp8 --kv-cache-dtype fp8
    echo "-- 8B fp8-block (FP8 weights + FP8 KV) vs HF on the dequantised weights, and vs loom bf16"
    timeout 400 python3 scripts/gpu/hf_compare.py --model /tmp/llama8b_fp8-block --dequantize-fp8 \
      --requests /tmp/fp8_req.jsonl --batch /tmp/b_8b_fp8-block.jsonl --bf16-batch /tmp/b_8b_bf16.jsonl | tail -1
    echo "-- 8B --quantization fp8 + FP8 KV: greedy agreement with loom bf16 (HF: the bf16 weights)"
    timeout 400 python3 scripts/gpu/hf_compare.py --model /tmp/llama8b --requests /tmp/fp8_req.jsonl \
      --batch /tmp/b_8b_online.jsonl --bf16-batch /tmp/b_8b_bf16.jsonl | tail -1
    ;;
  fp8latency)
    model8b
    : > /tmp/fp8lat.jsonl
    for v in "bf16" "fp8 --quantization fp8" "fp8kv --quantization fp8 --kv-cache-dtype fp8" \
             "fp8block --kv-cache-dtype fp8"; do
      set -- $v; name=$1; shift
      model=/tmp/llama8b; [ "$name" = fp8block ] && model=/tmp/llama8b_fp8-block
      [ -d "$model" ] || { echo "$name: no $model (run fp8acc first)"; continue; }
      timeout 150 $L bench latency --device cuda --model $model --input-len 128 --output-len 256 \
        --batch-sizes 1,64 --json "$@" > /tmp/lat_$name.jsonl 2> /tmp/lat_$name.err || tail -5 /tmp/lat_$name.err
      echo "-- $name"; cut -c1-700 /tmp/lat_$name.jsonl; cat /tmp/lat_$name.jsonl >> /tmp/fp8lat.jsonl
    done
    meta /tmp/fp8lat.jsonl "bench latency, Llama-3-8B shape: bf16; --quantization fp8 (per-channel W8A8) with bf16 and FP8 KV; the HF fp8 128x128-block checkpoint with FP8 KV" > "$OUT/bench_latency_8b_fp8.json"
    ;;
  goals)
    # The 8B figures the performance claims rest on, bf16 and FP8 (weights and
    # KV) side by side in one call: bench latency 128/256 at batch 1 and 64,
    # 1,000 ShareGPT-like requests, 512 x 1000/1000; GOALS_SEQS (512) and
    # GOALS_TOKENS (16384) for the offline runs.
    model8b
    $L bench workload --model /tmp/llama8b --dataset sharegpt --num-requests 1000 --seed 0 --output /tmp/w.jsonl
    : > /tmp/goals.jsonl
    sched="--max-num-seqs ${GOALS_SEQS:-512} --max-num-batched-tokens ${GOALS_TOKENS:-16384}"
    for v in "bf16" "fp8 --quantization fp8 --kv-cache-dtype fp8"; do
      set -- $v; name=$1; shift
      : > /tmp/g.jsonl
      timeout 120 $L bench latency --device cuda --model /tmp/llama8b --input-len 128 --output-len 256 \
        --batch-sizes 1,64 "$@" --json > /tmp/g.jsonl 2> /tmp/g.err || tail -3 /tmp/g.err
      timeout 150 $L bench offline --device cuda --model /tmp/llama8b --workload /tmp/w.jsonl $sched "$@" \
        --json >> /tmp/g.jsonl 2>> /tmp/g.err || tail -3 /tmp/g.err
      timeout 200 $L bench offline --device cuda --model /tmp/llama8b --dataset fixed --input-len 1000 \
        --output-len 1000 --num-requests 512 $sched "$@" --json >> /tmp/g.jsonl 2>> /tmp/g.err || tail -3 /tmp/g.err
      tag_rows /tmp/g.jsonl "$name" "variant=$name" >> /tmp/goals.jsonl
    done
    meta /tmp/goals.jsonl "Llama-3-8B shape, random weights: bf16, then --quantization fp8 --kv-cache-dtype fp8; bench latency 128/256 batch 1,64; bench offline 1,000 ShareGPT-like and 512 x 1000/1000 at $sched" > "$OUT/bench_goals_8b.json"
    ;;
  fp8fixed)
    model8b
    : > /tmp/fp8fixed.jsonl
    for v in "bf16" "fp8 --quantization fp8 --kv-cache-dtype fp8"; do
      set -- $v; name=$1; shift
      timeout 280 $L bench offline --device cuda --model /tmp/llama8b --dataset fixed --input-len 1000 \
        --output-len 1000 --num-requests 512 --max-num-seqs 512 --max-num-batched-tokens 16384 --json "$@" \
        > /tmp/fixed_$name.jsonl 2> /tmp/fixed_$name.err || tail -5 /tmp/fixed_$name.err
      echo "-- $name"; grep -v "^|" /tmp/fixed_$name.jsonl | cut -c1-900; cat /tmp/fixed_$name.jsonl >> /tmp/fp8fixed.jsonl
    done
    meta /tmp/fp8fixed.jsonl "bench offline: 512 requests, 1000 in / 1000 out, Llama-3-8B shape, --max-num-seqs 512 --max-num-batched-tokens 16384: bf16, then --quantization fp8 --kv-cache-dtype fp8 (run_info: KV blocks)" > "$OUT/bench_fixed_8b_fp8.json"
    ;;
  fp8rows|fp8rowstest)
    # The per-row FP8 GEMMs (cuBLASLt's unit-scale GEMM + a scaling pass,
    # CUTLASS's row-scaled GEMM, the split-k kernel for few rows): the bitwise
    # test, the GEMM tables, alone-vs-batched under each choice.
    timeout 200 $T/test_cuda_fp8 --gtest_filter='*Cutlass*:*SmallMAndBatch*:*LinearMatches*' > /tmp/fr.log 2>&1
    echo "test_cuda_fp8 (CUTLASS and split-k cases) rc=$? $(tail -1 /tmp/fr.log)"
    grep -E "FAILED|Failure|Expected|Which|cutlass rows|differ" /tmp/fr.log | head -60
    : > /tmp/fr_engine.log
    for v in "LOOM_FP8_ROW_SPLIT_ROWS=16" "LOOM_FP8_CUTLASS_ROWS_FROM=1"; do
      env $v timeout 200 $T/test_cuda_engine --gtest_filter='*BatchAndPrefix*:*TokenConstraintMask*' \
        > /tmp/fr_e.log 2>&1; echo "test_cuda_engine alone vs batched, $v: rc=$?"
      grep -E "identical" /tmp/fr_e.log | grep -E "fp8|online" | head -12; cat /tmp/fr_e.log >> /tmp/fr_engine.log
    done
    timeout 150 $T/bench_cuda_ops --matmul > /tmp/fr_mm.log 2>&1; echo "bench_cuda_ops --matmul rc=$?"
    awk '/per-row scales/{f=1} /128x128 block/{f=0} f' /tmp/fr_mm.log | grep -E "forward step|split-k +(1|8) "
    cat /tmp/fr.log /tmp/fr_engine.log /tmp/fr_mm.log > "$OUT/fp8rows_tests.log"
    ;;&
  fp8rows|fp8rowsbench)
    model8b
    $L bench workload --model /tmp/llama8b --dataset sharegpt --num-requests 1000 --seed 0 --output /tmp/w.jsonl
    : > /tmp/fr_all.jsonl
    for round in ${FP8ROWS_ROUNDS:-1 2}; do
      for v in "cublaslt LOOM_FP8_CUTLASS_ROWS_FROM=0" "default" "split8 LOOM_FP8_ROW_SPLIT_ROWS=8" \
               "split16 LOOM_FP8_ROW_SPLIT_ROWS=16" "cutlass LOOM_FP8_CUTLASS_ROWS_FROM=1"; do
        set -- $v; name=$1; shift
        case " ${FP8ROWS_VARIANTS:-cublaslt default split8 cutlass} " in *" $name "*) ;; *) continue ;; esac
        f="--quantization fp8 --kv-cache-dtype fp8"
        env "$@" timeout 150 $L bench latency --device cuda --model /tmp/llama8b --input-len 128 --output-len 256 \
          --batch-sizes ${FP8ROWS_BATCHES:-1,64} $f --json > /tmp/fr.jsonl 2> /tmp/fr.err || tail -3 /tmp/fr.err
        [ "${FP8ROWS_OFFLINE:-1}" = 1 ] && { env "$@" timeout 200 $L bench offline --device cuda --model /tmp/llama8b --workload /tmp/w.jsonl \
          --max-num-seqs 512 --max-num-batched-tokens 16384 $f --json >> /tmp/fr.jsonl 2>> /tmp/fr.err || tail -3 /tmp/fr.err; }
        [ "$round" = 1 ] && [ "${FP8ROWS_FIXED:-1}" = 1 ] && { env "$@" timeout 280 $L bench offline --device cuda --model /tmp/llama8b --dataset fixed \
          --input-len 1000 --output-len 1000 --num-requests 512 --max-num-seqs 512 --max-num-batched-tokens 16384 $f \
          --json >> /tmp/fr.jsonl 2>> /tmp/fr.err || tail -3 /tmp/fr.err; }
        echo "-- $name, round $round"
        tag_rows /tmp/fr.jsonl " " "variant=$name" "round=$round" >> /tmp/fr_all.jsonl
      done
    done
    meta /tmp/fr_all.jsonl "Llama-3-8B shape, --quantization fp8 --kv-cache-dtype fp8, per-row FP8 GEMM choices alternated: cublaslt (LOOM_FP8_CUTLASS_ROWS_FROM=0: cuBLASLt unit scales + scaling pass at every m), default (CUTLASS's row-scaled GEMM from 65 rows), split8/split16 (LOOM_FP8_ROW_SPLIT_ROWS=8/16: the split-k kernel up to that many rows), cutlass (LOOM_FP8_CUTLASS_ROWS_FROM=1); bench latency 128/256 batch ${FP8ROWS_BATCHES:-1,64}; bench offline 1,000 ShareGPT-like 512:16384; 512 x 1000/1000 (round 1)" > "$OUT/fp8_row_gemms.json"
    ;;
  attnncu)
    : > "$OUT/attn_decode.txt"
    for kv in bf16 fp8; do for seqs in 128 256 512; do for ctx in 1024 1536 2048; do
      for first in 0 1; do  # blocks ordered token first (default) or kv head first
        echo -n "LOOM_ATTN_HEADS_FIRST=$first " | tee -a "$OUT/attn_decode.txt"
        LOOM_ATTN_HEADS_FIRST=$first timeout 60 $T/bench_cuda_ops --decode-attn $seqs $ctx $kv 20 2>&1 |
          tail -1 | tee -a "$OUT/attn_decode.txt"
      done
    done; done; done
    # The same bytes with one kv head (8x the sequences): a block's 16 slots of
    # a head are then one contiguous run, as a head-major cache layout would be.
    for kv in bf16 fp8; do
      echo -n "one kv head: " | tee -a "$OUT/attn_decode.txt"
      timeout 60 $T/bench_cuda_ops --decode-attn 4096 1536 $kv 20 1 2>&1 | tail -1 | tee -a "$OUT/attn_decode.txt"
    done
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    [ -n "$ncu" ] || { echo "no ncu"; continue; }
    # --decode-attn runs 3 warm-up calls, then records its calls in a graph.
    timeout 200 "$ncu" --clock-control none -k "regex:paged_attention" --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
      --section SchedulerStats --section LaunchStats --section ComputeWorkloadAnalysis --section InstructionStats \
      $T/bench_cuda_ops --decode-attn 512 1536 fp8 3 2>&1 | sed -n '/==PROF==/,$p' | grep -v "^ *---" > "$OUT/ncu_attn.txt"
    echo "ncu rc=${PIPESTATUS[0]}"
    grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Issue Slots|Stall|Block Limit" "$OUT/ncu_attn.txt" | head -40
    ;;
  fp8envab)
    model8b
    $L bench workload --model /tmp/llama8b --dataset sharegpt --num-requests 1000 --seed 0 --output /tmp/w.jsonl
    f=${FP8AB_FLAGS-"--quantization fp8 --kv-cache-dtype fp8"}
    : > /tmp/envab.jsonl
    for round in $(seq 1 "${FP8AB_ROUNDS:-1}"); do
      for val in ${FP8AB_VALUES:-0 1}; do
        : > /tmp/ea.jsonl
        env "${FP8AB_ENV:?set FP8AB_ENV}=$val" timeout 120 $L bench latency --device cuda --model /tmp/llama8b \
          --input-len 128 --output-len 256 --batch-sizes ${FP8AB_BATCHES:-1,64} $f --json > /tmp/ea.jsonl 2> /tmp/ea.err || tail -3 /tmp/ea.err
        if [ "${FP8AB_OFFLINE:-1}" = 1 ]; then
          env "$FP8AB_ENV=$val" timeout 150 $L bench offline --device cuda --model /tmp/llama8b --workload /tmp/w.jsonl \
            --max-num-seqs 512 --max-num-batched-tokens 16384 $f --json >> /tmp/ea.jsonl 2>> /tmp/ea.err || tail -3 /tmp/ea.err
          env "$FP8AB_ENV=$val" timeout 200 $L bench offline --device cuda --model /tmp/llama8b --dataset fixed \
            --input-len 1000 --output-len 1000 --num-requests 512 --max-num-seqs 512 --max-num-batched-tokens 16384 $f \
            --json >> /tmp/ea.jsonl 2>> /tmp/ea.err || tail -3 /tmp/ea.err
        fi
        tag_rows /tmp/ea.jsonl "$FP8AB_ENV=$val" "env=$FP8AB_ENV=$val" "round=$round" >> /tmp/envab.jsonl
      done
    done
    meta /tmp/envab.jsonl "Llama-3-8B shape, flags '$f', $FP8AB_ENV at ${FP8AB_VALUES:-0 1} alternated: bench latency 128/256 batch ${FP8AB_BATCHES:-1,64}; bench offline 1,000 ShareGPT-like and 512 x 1000/1000 at 512:16384" > "$OUT/${FP8AB_NAME:-fp8_envab}.json"
    ;;
  fp8tiles)
    # The per-row FP8 GEMM's tiles (LOOM_FP8_ROW_TILE: 0 by shape, 1 ping-pong,
    # 2 128x256 (both with fast accumulation), 3 128x128): the GEMMs alone
    # under each, the bit-for-bit tests under each, then 512 x 1000/1000 with
    # FP8 weights and KV under each FP8TILES_ENVS entry ("A=1,B=2"; "-": none).
    # FP8TILES_TILES, FP8TILES_TEST_ENVS: which tiles, which test environments.
    for t in ${FP8TILES_TILES:-0 1 2 3}; do
      LOOM_FP8_ROW_TILE=$t timeout 150 $T/bench_cuda_ops --fp8-tiles 20 > /tmp/tiles_$t.log 2>&1
      echo "-- LOOM_FP8_ROW_TILE=$t rc=$?"; grep -E "^  ->|: " /tmp/tiles_$t.log | head -12
      cat /tmp/tiles_$t.log >> "$OUT/fp8_tiles_ops.txt"
    done
    for env in ${FP8TILES_TEST_ENVS:-LOOM_FP8_FAST_ACCUM=1 LOOM_FP8_ROW_TILE=1,LOOM_FP8_FAST_ACCUM=1 LOOM_FP8_ROW_TILE=2,LOOM_FP8_FAST_ACCUM=1}; do
      env ${env//,/ } timeout 200 $T/test_cuda_fp8 \
        --gtest_filter='*CutlassRowGemm*:*CublasLtAndCutlass*:*FastAccumulation*:*RowsIndependent*' > /tmp/tt.log 2>&1
      echo "test_cuda_fp8 under $env: rc=$? $(tail -1 /tmp/tt.log)"; grep -E "Failure|Expected|Which is" /tmp/tt.log | head -8
      { echo "== $env"; cat /tmp/tt.log; } >> "$OUT/fp8_tiles_tests.log"
    done
    model8b
    : > /tmp/tiles.jsonl
    for env in ${FP8TILES_ENVS:-- LOOM_FP8_FAST_ACCUM=1 LOOM_FP8_FAST_ACCUM=1,LOOM_FP8_ROW_TILE=3}; do
      vars=${env//,/ }; [ "$env" = "-" ] && vars=
      env $vars timeout 150 $L bench offline --device cuda --model /tmp/llama8b --dataset fixed --input-len 1000 \
        --output-len 1000 --num-requests 512 --max-num-seqs 512 --max-num-batched-tokens 16384 \
        --quantization fp8 --kv-cache-dtype fp8 --json > /tmp/tf.jsonl 2> /tmp/tf.err || tail -3 /tmp/tf.err
      tag_rows /tmp/tf.jsonl "$env" "env=$env" >> /tmp/tiles.jsonl
    done
    meta /tmp/tiles.jsonl "bench offline 512 x 1000/1000, Llama-3-8B shape, --quantization fp8 --kv-cache-dtype fp8, --max-num-seqs 512 --max-num-batched-tokens 16384, under each environment (env)" > "$OUT/fp8_tiles_fixed.json"
    ;;
  fp8fasttest)
    timeout 120 $T/test_cuda_fp8 --gtest_filter='*FastAccumulation*' > /tmp/ff.log 2>&1
    echo "test_cuda_fp8 FastAccumulationRowGemmsAgree rc=$? $(tail -1 /tmp/ff.log)"
    grep -E "fast accumulation|Failure|Expected|Which" /tmp/ff.log | head -30
    timeout 200 $T/bench_cuda_ops --matmul > /tmp/ff_mm.log 2>&1; echo "bench_cuda_ops --matmul rc=$?"
    awk '/per-row scales/{f=1} /128x128 block/{f=0} f' /tmp/ff_mm.log | grep -E "forward step"
    sed -n '/== prefill GEMMs/,$p' /tmp/ff_mm.log | head -24
    LOOM_FP8_FAST_ACCUM=1 timeout 200 $T/test_cuda_engine --gtest_filter='*BatchAndPrefix*' > /tmp/ff_e.log 2>&1
    echo "test_cuda_engine alone vs batched, LOOM_FP8_FAST_ACCUM=1: rc=$?"; grep identical /tmp/ff_e.log | grep fp8 | head -12
    cat /tmp/ff.log /tmp/ff_mm.log /tmp/ff_e.log > "$OUT/fp8fasttest.log"
    ;;
  fp8offline|offsweep)
    # fp8offline: one pair (512:16384), no profile; offsweep: the OFFSWEEP pairs with the step profile.
    pairs=${OFFSWEEP:-512:16384 1024:16384 1024:32768} profile=--profile out=bench_offline_sweep_8b.json
    [ "$stage" = fp8offline ] && pairs=512:16384 profile= out=bench_offline_8b_fp8.json
    model8b
    $L bench workload --model /tmp/llama8b --dataset sharegpt --num-requests 1000 --seed 0 --output /tmp/w.jsonl
    : > /tmp/offsweep.jsonl
    for v in "bf16" "fp8 --quantization fp8 --kv-cache-dtype fp8"; do
      set -- $v; name=$1; shift
      for st in $pairs; do
        seqs=${st%%:*}; toks=${st##*:}
        timeout 200 $L bench offline --device cuda --model /tmp/llama8b --workload /tmp/w.jsonl --max-num-seqs "$seqs" \
          --max-num-batched-tokens "$toks" $profile --json "$@" > /tmp/os.jsonl 2> /tmp/os.err || tail -5 /tmp/os.err
        echo "-- $name seqs $seqs tokens $toks"; grep -v "^|" /tmp/os.jsonl | cut -c1-900
        if [ -n "$profile" ]; then
          head -1 /tmp/os.jsonl > /tmp/os_profile.json && python3 scripts/gpu/print_step_profile.py /tmp/os_profile.json | head -40
        fi
        grep "^{" /tmp/os.jsonl >> /tmp/offsweep.jsonl
      done
    done
    meta /tmp/offsweep.jsonl "bench offline${profile:+ --profile}: 1,000 ShareGPT-like requests, Llama-3-8B shape (greedy), bf16 then --quantization fp8 --kv-cache-dtype fp8, at --max-num-seqs:--max-num-batched-tokens $pairs" > "$OUT/$out"
    ;;
  piecewise)
    timeout 300 $T/test_cuda_model --gtest_filter='*Piecewise*:*Recorded*' > /tmp/pw.log 2>&1
    echo "test_cuda_model (piecewise, recorded) rc=$?"; grep -E "piecewise|FAILED  \]" /tmp/pw.log | head -30
    python3 scripts/gpu/make_random_model.py --shape 0.5b --out /tmp/qwen05 > /dev/null || exit 1
    model8b
    $L bench workload --model /tmp/llama8b --dataset sharegpt --num-requests 1000 --seed 0 --output /tmp/w.jsonl
    : > /tmp/pw_all.jsonl
    for pw in 0 1; do
      LOOM_PIECEWISE_STEPS=$pw taskset -c $server_cpus $L serve --device cuda --model /tmp/qwen05 --port 18000 \
        --max-num-seqs 512 --max-num-batched-tokens 16384 --profile-steps > /tmp/serve_pw.log 2>&1 &
      spid=$!
      for i in $(seq 1 120); do curl -sf http://127.0.0.1:18000/ready > /dev/null && break; sleep 1; done
      timeout 300 taskset -c $client_cpus $L bench serve --base-url http://127.0.0.1:18000 --model qwen05 \
        --dataset fixed --input-len 128 --output-len 32 --num-requests 3000 --warmup 50 \
        --sweep ${PIECE_RATES:-2500,3000,3500} --token-id-range 300,100000 --server-pid $spid --profile \
        --output /tmp/pw_small_$pw.json > /tmp/pw_small.out 2>&1 || tail -20 /tmp/pw_small.out
      echo "-- 0.5B serve, LOOM_PIECEWISE_STEPS=$pw"; grep -E "^rate|^\| [0-9]" /tmp/pw_small.out
      [ -f /tmp/pw_small_$pw.json ] && python3 scripts/gpu/print_step_profile.py /tmp/pw_small_$pw.json | head -30
      kill -TERM $spid; wait $spid
      [ -f /tmp/pw_small_$pw.json ] && cp /tmp/pw_small_$pw.json "$OUT/bench_serve_small_piecewise_$pw.json"
      LOOM_PIECEWISE_STEPS=$pw timeout 300 $L bench offline --device cuda --model /tmp/llama8b --workload /tmp/w.jsonl \
        --max-num-seqs 1024 --max-num-batched-tokens 16384 --profile --json > /tmp/pw_off.jsonl 2> /tmp/pw_off.err ||
        tail -5 /tmp/pw_off.err
      echo "-- 8B offline, LOOM_PIECEWISE_STEPS=$pw"; grep -v "^|" /tmp/pw_off.jsonl | cut -c1-900
      head -1 /tmp/pw_off.jsonl > /tmp/pw_off_profile.json && python3 scripts/gpu/print_step_profile.py /tmp/pw_off_profile.json | head -30
      grep "^{" /tmp/pw_off.jsonl >> /tmp/pw_all.jsonl
    done
    meta /tmp/pw_all.jsonl "bench offline --profile: 1,000 ShareGPT-like requests, Llama-3-8B shape bf16, --max-num-seqs 1024 --max-num-batched-tokens 16384, LOOM_PIECEWISE_STEPS=0 then 1" > "$OUT/bench_offline_8b_piecewise.json"
    ;;
  check)
    # Quick: the model tests, GPU metrics from NVML on /metrics, the fit check.
    timeout 300 $T/test_cuda_model > /tmp/m.log 2>&1; echo "test_cuda_model rc=$? $(tail -1 /tmp/m.log)"
    grep -E "FAILED  \]" /tmp/m.log | sort -u | head
    python3 scripts/gpu/make_random_model.py --shape small --out /tmp/small > /dev/null || exit 1
    $L env --model /tmp/small | tail -1
    $L serve --device cuda --model /tmp/small --port 18001 > /tmp/serve_check.log 2>&1 &
    cpid=$!
    for i in $(seq 1 60); do curl -sf http://127.0.0.1:18001/ready > /dev/null && break; sleep 1; done
    curl -s http://127.0.0.1:18001/v1/completions -H 'Content-Type: application/json' \
      -d '{"model":"small","prompt":[1000,2000,3000],"max_tokens":8,"temperature":0.7,"seed":3}' | cut -c1-300; echo
    curl -s http://127.0.0.1:18001/metrics | grep -E "^loom_gpu|^loom_request_queue_time_seconds_count|^loom_kv_cache_usage" | head
    kill -TERM $cpid; wait $cpid; echo "serve exit $?"
    grep -i "nvml\|gpu metrics" /tmp/serve_check.log | head -3
    ;;
  esac
done
echo "total: $(( $(date +%s) - t0 )) s"
