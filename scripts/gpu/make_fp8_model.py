#!/usr/bin/env python3
"""Makes an FP8 (E4M3) checkpoint of an HF Llama-style bf16 model directory
(e.g. scripts/gpu/make_random_model.py's output) with torch on the GPU, in one
of the formats loom reads (scripts/fp8_checkpoint.py):

  fp8-block    HF quant_method "fp8", 128x128 block scales (Qwen3-FP8 / DeepSeek-V3 layout)
  fp8-tensor   HF quant_method "fp8", per-tensor scales, static input scales
  ct-channel   compressed-tensors FP8_DYNAMIC: per-channel scales, dynamic per-token activations
  ct-tensor    compressed-tensors FP8: per-tensor scales, static input scales, FP8 KV cache scales

Static input scales and KV cache scales are calibrated by running the bf16
model on random token prompts. The shards keep the source's layout; config.json
gains quantization_config; tokenizer and generation files are copied.

  python3 scripts/gpu/make_fp8_model.py --src /tmp/llama8b --scheme fp8-block --out /tmp/llama8b_fp8

The checkpoint's dequantised weights (fp8 * scale) are what loom's FP8 model
runs; scripts/gpu/hf_compare.py --dequantize-fp8 builds HF's model from them.
"""
import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import fp8_checkpoint as fp8  # noqa: E402


def shards(src):
    index = src / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        return sorted(set(weight_map.values()))
    return ["model.safetensors"]


def calibrate(src, n_prompts=4, length=64):
    """max |input| of every linear layer and max |k|, |v| (k_proj / v_proj
    outputs), over random token prompts run by HF in bf16."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16).cuda().eval()
    amax = {}
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and name.split(".")[-1] in fp8.LINEAR:
            def pre(m, args, name=name):
                amax[name + ".in"] = max(amax.get(name + ".in", 0.0), float(args[0].abs().max()))

            def post(m, args, out, name=name):
                amax[name + ".out"] = max(amax.get(name + ".out", 0.0), float(out.abs().max()))
            mod.register_forward_pre_hook(pre)
            mod.register_forward_hook(post)
    gen = torch.Generator(device="cuda").manual_seed(0)
    vocab = model.config.vocab_size
    with torch.no_grad():
        for _ in range(n_prompts):
            model(torch.randint(300, vocab - 300, (1, length), generator=gen, device="cuda"))
    del model
    torch.cuda.empty_cache()
    return amax


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True, help="bf16 HF model directory")
    ap.add_argument("--scheme", choices=fp8.SCHEMES, required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    src, out = Path(args.src), Path(args.out)
    t0 = time.time()
    out.mkdir(parents=True, exist_ok=True)
    static = fp8.static_activations(args.scheme)
    kv = args.scheme == "ct-tensor"
    amax = calibrate(src) if static or kv else {}

    weight_map = {}
    cfg = json.loads((src / "config.json").read_text())
    for shard in shards(src):
        tensors = {}
        with safe_open(str(src / shard), framework="pt", device="cuda") as f:
            for name in f.keys():
                t = f.get_tensor(name)
                if not fp8.is_linear(name):
                    tensors[name] = t
                    continue
                q, s = fp8.quantize_weight(t, args.scheme)
                base = name[: -len(".weight")]
                tensors[name] = q
                tensors[base + "." + fp8.scale_name(args.scheme)] = s.float()
                if static:
                    tensors[base + ".input_scale"] = fp8.scale_for_amax(
                        torch.tensor(amax[base + ".in"], device="cuda")).reshape(1)
                if kv and name.endswith("self_attn.k_proj.weight"):
                    attn = name[: -len(".k_proj.weight")]
                    for which in ("k", "v"):
                        s = fp8.scale_for_amax(torch.tensor(amax[f"{attn}.{which}_proj.out"], device="cuda"))
                        tensors[f"{attn}.{which}_scale"] = s.reshape(1)
        tensors = {k: v.contiguous().cpu() for k, v in tensors.items()}
        save_file(tensors, str(out / shard), metadata={"format": "pt"})
        for k in tensors:
            weight_map[k] = shard
        del tensors
        torch.cuda.empty_cache()
    if (src / "model.safetensors.index.json").exists():
        total = sum(os.path.getsize(out / s) for s in set(weight_map.values()))
        (out / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    cfg["quantization_config"] = fp8.quantization_config(args.scheme, kv=kv)
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        if (src / name).exists():
            shutil.copy(src / name, out / name)
    print(json.dumps({"out": str(out), "scheme": args.scheme, "seconds": round(time.time() - t0, 1)}))


if __name__ == "__main__":
    main()
