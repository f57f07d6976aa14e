#!/usr/bin/env python3
"""loom's /v1/embeddings against HF transformers on the same random weights,
on the GPU (device_e2e.sh stage `embed`).

Makes a Qwen2.5-0.5B-shaped Qwen2 checkpoint (q/k/v biases, tied embeddings)
with random bf16 weights (torch, seeded; the byte-level tokenizer of
make_random_model.py), once as a plain decoder (last-token pooling) and once
with sentence-transformers' modules.json + 1_Pooling/config.json saying mean
pooling. For each, serves it with `loom serve --device cuda`, embeds 24
random token-id prompts (1..700 tokens) in one request and a few one by one,
and compares with HF's `last_hidden_state` of each prompt alone, pooled and
L2-normalised in f32: HF on the bf16 weights upcast to f32 is the reference;
HF in bf16 shows how far bf16 rounding alone moves the vectors. Prints one
JSON line per pooling and fails when loom's worst cosine is below --min-cosine
or a batched vector differs from its one-by-one vector.

  python3 scripts/gpu/embed_check.py --loom build/gpu/loom [--out result.json]
  python3 scripts/gpu/embed_check.py --loom build/cpu/loom --device cpu --shape tiny  # smoke test
"""
import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_random_model import write_tokenizer  # noqa: E402

SHAPES = {
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, vocab_size=151936),
    # A smoke test of the script itself on a CPU (--device cpu).
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=151936),
}
SHAPE = SHAPES["0.5b"]
DEVICE = "cuda"


def make_model(out, seed):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    os.makedirs(out, exist_ok=True)
    bos, eos, eot = write_tokenizer(out, SHAPE["vocab_size"])
    cfg = Qwen2Config(**SHAPE, max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=1000000.0,
                      tie_word_embeddings=True, bos_token_id=bos, eos_token_id=[eos, eot])
    torch.manual_seed(seed)
    with torch.device(DEVICE):
        model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    with torch.no_grad():  # O(1) activations: norms at 1, larger projections
        for name, p in model.named_parameters():
            if "norm" in name:
                p.fill_(1.0)
            elif p.ndim == 2 and "embed" not in name:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[1]))
            elif "bias" in name:
                p.normal_(0.0, 0.1)
    model.save_pretrained(out, safe_serialization=True)


def with_mean_pooling(src, out):
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "1_Pooling"))
    for f in os.listdir(src):
        os.symlink(os.path.join(src, f), os.path.join(out, f))
    with open(os.path.join(out, "modules.json"), "w") as f:
        json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                   {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}],
                  f)
    with open(os.path.join(out, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": SHAPE["hidden_size"], "pooling_mode_mean_tokens": True}, f)


def hf_embeddings(model_dir, prompts, pooling, dtype):
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(model_dir, dtype=dtype, attn_implementation="eager").to(DEVICE).eval()
    out = []
    with torch.no_grad():
        for ids in prompts:
            h = model(torch.tensor([ids], device=DEVICE)).last_hidden_state[0].float()
            v = h[-1] if pooling == "last" else h.mean(0)
            out.append(torch.nn.functional.normalize(v, dim=0).cpu().tolist())
    del model
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    return out


def post(url, body):
    req = urllib.request.Request(url + "/v1/embeddings", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def loom_embeddings(loom, model_dir, prompts, port):
    log = open(f"/tmp/embed_serve_{port}.log", "w")
    proc = subprocess.Popen([loom, "serve", model_dir, "--device", DEVICE, "--port", str(port),
                             "--served-model-name", "m", "--max-num-batched-tokens", "2048"],
                            stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(url + "/ready", timeout=2)
                break
            except Exception:
                if proc.poll() is not None:
                    raise SystemExit(open(log.name).read()[-3000:])
                time.sleep(1)
        batch = post(url, {"model": "m", "input": prompts, "encoding_format": "float"})
        singles = [post(url, {"model": "m", "input": p})["data"][0]["embedding"] for p in prompts[:4]]
        pooling_line = [line for line in open(log.name) if "/v1/embeddings pooling" in line]
        return [d["embedding"] for d in batch["data"]], singles, batch["usage"], pooling_line
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def compare(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    cos = dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))
    return cos, max(abs(x - y) for x, y in zip(a, b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loom", required=True)
    ap.add_argument("--dir", default="/tmp/embed_qwen2")
    ap.add_argument("--out")
    ap.add_argument("--min-cosine", type=float, default=0.999)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="0.5b")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    global SHAPE, DEVICE
    SHAPE, DEVICE = SHAPES[args.shape], args.device
    import torch

    make_model(args.dir, seed=11)
    with_mean_pooling(args.dir, args.dir + "_mean")
    r = random.Random(5)
    prompts = [[r.randrange(300, 150000) for _ in range(n)]
               for n in [1, 2, 7, 33, 700] + [r.randrange(3, 600) for _ in range(19)]]
    results, ok = [], True
    for pooling, model_dir, port in [("last", args.dir, 18050), ("mean", args.dir + "_mean", 18051)]:
        got, singles, usage, log_line = loom_embeddings(args.loom, model_dir, prompts, port)
        ref = hf_embeddings(args.dir, prompts, pooling, torch.float32)
        hf_bf16 = hf_embeddings(args.dir, prompts, pooling, torch.bfloat16)
        loom_vs_hf = [compare(g, w) for g, w in zip(got, ref)]
        bf16_vs_hf = [compare(g, w) for g, w in zip(hf_bf16, ref)]
        batch_vs_single = [compare(s, g) for s, g in zip(singles, got)]
        row = {"pooling": pooling, "prompts": len(prompts), "prompt_tokens": usage["prompt_tokens"],
               "loom_worst_cosine": min(c for c, _ in loom_vs_hf),
               "loom_max_abs_diff": max(d for _, d in loom_vs_hf),
               "hf_bf16_worst_cosine": min(c for c, _ in bf16_vs_hf),
               "hf_bf16_max_abs_diff": max(d for _, d in bf16_vs_hf),
               "batch_vs_single_worst_cosine": min(c for c, _ in batch_vs_single),
               "server_pooling_log": log_line[0].strip()[-80:] if log_line else None}
        # Batched vs one by one: bf16 GEMMs and attention splits differ with the
        # batch, so the two may part by bf16 rounding noise, but by no more than
        # a few times HF's own bf16-vs-f32 distance on the same prompts.
        bf16_noise = 1.0 - row["hf_bf16_worst_cosine"]
        row["pass"] = (row["loom_worst_cosine"] >= args.min_cosine
                       and 1.0 - row["batch_vs_single_worst_cosine"] <= max(3 * bf16_noise, 1e-4)
                       and usage["prompt_tokens"] == sum(map(len, prompts)))
        ok = ok and row["pass"]
        print(json.dumps(row), flush=True)
        results.append(row)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"what": f"loom /v1/embeddings vs HF transformers, random Qwen2 ({args.shape} shape), "
                               f"bf16 weights, {DEVICE}",
                       "results": results}, f, indent=1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
