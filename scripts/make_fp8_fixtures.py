#!/usr/bin/env python3
"""Builds the tiny FP8 checkpoint fixtures under tests/fixtures/models/ (the
loader and forward tests on the CPU, the FP8 model tests on the GPU).

Each fixture is a seeded random float32 HF model (made as
scripts/make_model_fixtures.py makes its fixtures) whose linear layers are
quantised to FP8 E4M3 in one of the formats loom reads (scripts/fp8_checkpoint.py):

  llama3_fp8_block    HF "fp8", 128x128 block scales (weight_scale_inv); hidden 192 and
                      MLP 320 are not multiples of 128, so blocks are ragged at the edges
  qwen2_fp8_channel   compressed-tensors FP8_DYNAMIC: per-channel weight scales, dynamic
                      per-token activations; q/k/v biases, tied embeddings
  llama3_fp8_static   compressed-tensors FP8: per-tensor weight scales, static input
                      scales, FP8 KV cache scales (kv_cache_scheme), all calibrated on the prompts

`reference.json` holds what make_model_fixtures.py writes, computed by HF
transformers running the *dequantised* weights (fp8 * scale) in float32 with
unquantised activations, read back from the written files: prompts, logits at
every position, greedy continuation (32 tokens), `bf16_deviation` (HF's own
bf16 run of those weights against the f32 logits) and `w8a8_deviation`: per
prompt and position, max |logit - f32 logit| of HF in bf16 with every linear
layer's input quantised to FP8 as loom quantises it (per token, per 1x128
group or static scale), i.e. how far the W8A8 arithmetic loom's GPU backend
runs may move each row. The GPU test scales its tolerance by it.

Usage: python3 scripts/make_fp8_fixtures.py [--out tests/fixtures/models] [--only NAME...]
Requires: torch, transformers, safetensors, numpy (PyPI).
"""
import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fp8_checkpoint as fp8  # noqa: E402
import make_model_fixtures as mmf  # noqa: E402

FIXTURES = {
    "llama3_fp8_block": ("LlamaConfig", dict(
        hidden_size=192, intermediate_size=320, num_hidden_layers=2, num_attention_heads=6,
        num_key_value_heads=2, head_dim=32, max_position_embeddings=512, rms_norm_eps=1e-5,
        rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                             high_freq_factor=4.0, original_max_position_embeddings=64)),
        "fp8-block"),
    "qwen2_fp8_channel": ("Qwen2Config", dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters=dict(rope_type="default", rope_theta=1000000.0)),
        "ct-channel"),
    "llama3_fp8_static": ("LlamaConfig", dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0)),
        "ct-tensor"),
}


def calibrate(model, prompts):
    """Per linear layer: max |input|; per attention layer: max |k|, |v| (the
    k_proj / v_proj outputs), over the prompts."""
    amax = {}
    hooks = []
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and name.split(".")[-1] in fp8.LINEAR:
            def pre(m, args, name=name):
                amax[name + ".in"] = max(amax.get(name + ".in", 0.0), float(args[0].abs().max()))

            def post(m, args, out, name=name):
                amax[name + ".out"] = max(amax.get(name + ".out", 0.0), float(out.abs().max()))
            hooks.append(mod.register_forward_pre_hook(pre))
            hooks.append(mod.register_forward_hook(post))
    with torch.no_grad():
        for ids in prompts:
            model(torch.tensor([ids]))
    for h in hooks:
        h.remove()
    return amax


def fp8_tensors(model, scheme, amax):
    """The checkpoint's tensors: FP8 linear weights with their scales (and
    static input / KV cache scales), everything else as float32."""
    tensors = {}
    tied = model.config.tie_word_embeddings
    for name, p in model.state_dict().items():
        if tied and name == "lm_head.weight":
            continue
        if not fp8.is_linear(name):
            tensors[name] = p.detach().float().contiguous()
            continue
        q, s = fp8.quantize_weight(p.detach(), scheme)
        base = name[: -len(".weight")]
        tensors[name] = q.contiguous()
        tensors[base + "." + fp8.scale_name(scheme)] = s.float().contiguous()
        if fp8.static_activations(scheme):
            tensors[base + ".input_scale"] = fp8.scale_for_amax(torch.tensor(amax[base + ".in"])).reshape(1)
    if scheme == "ct-tensor":  # KV cache scales from the k/v projections' outputs
        for i in range(model.config.num_hidden_layers):
            attn = f"model.layers.{i}.self_attn"
            for which in ("k", "v"):
                s = fp8.scale_for_amax(torch.tensor(amax[f"{attn}.{which}_proj.out"]))
                tensors[f"{attn}.{which}_scale"] = s.reshape(1)
    return tensors


def w8a8_model(config, state, tensors, scheme):
    """HF in bf16 on the dequantised weights, every linear input quantised to
    FP8 and back as loom's GPU kernels do."""
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32).eval()
    model.load_state_dict(state, strict=False)
    model = model.to(torch.bfloat16)
    mode = fp8.activation_mode(scheme)
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and name.split(".")[-1] in fp8.LINEAR:
            s = tensors.get(name + ".input_scale")

            def pre(m, args, s=s):
                x = args[0]
                return (fp8.quantize_activation(x, mode, s).to(x.dtype),)
            mod.register_forward_pre_hook(pre)
    return model


def build(name, out_root, seed):
    cls_name, kwargs, scheme = FIXTURES[name]
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    config = getattr(transformers, cls_name)(vocab_size=mmf.VOCAB, **kwargs)
    config._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32).eval()
    mmf.randomize(model, gen, False, config.tie_word_embeddings)
    prompts = mmf.make_prompts(gen)

    d = out_root / name
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d, safe_serialization=True)  # config.json as HF writes it
    for f in d.glob("*.safetensors"):
        f.unlink()
    tensors = fp8_tensors(model, scheme, calibrate(model, prompts))
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})

    cfg_path = d / "config.json"
    cfg = json.loads(cfg_path.read_text())
    for k in ("dtype", "torch_dtype", "transformers_version"):
        cfg.pop(k, None)
    for k in [k for k in cfg if k.startswith("_")]:
        cfg.pop(k)
    cfg = mmf.old_spelling(cfg, False)
    cfg["quantization_config"] = fp8.quantization_config(scheme, kv=scheme == "ct-tensor")
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    (d / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": [2, 3]}, indent=2) + "\n")

    # References from the files as written: HF on the dequantised weights.
    written = load_file(str(d / "model.safetensors"))
    state = fp8.dequantized_state_dict(written)
    ref_model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32).eval()
    missing, unexpected = ref_model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    if config.tie_word_embeddings:
        ref_model.tie_weights()
    ref_bf16 = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32).eval()
    ref_bf16.load_state_dict(state, strict=False)
    ref_bf16 = ref_bf16.to(torch.bfloat16)
    ref = mmf.reference(ref_model, ref_bf16, prompts)
    w8a8 = w8a8_model(config, state, written, scheme)
    ref["w8a8_deviation"] = []
    with torch.no_grad():
        for ids, rows in zip(prompts, ref["logits"]):
            got = w8a8(torch.tensor([ids])).logits[0].float()
            dev = (got - torch.tensor(rows)).abs().amax(-1)
            ref["w8a8_deviation"].append([float(f"{v:.4g}") for v in dev.tolist()])
    ref.update(model=name, scheme=scheme, torch=torch.__version__, transformers=transformers.__version__,
               seed=seed, new_tokens=mmf.NEW_TOKENS)
    if ref["min_greedy_margin"] < mmf.MIN_MARGIN:
        return False
    distinct = min(len(set(g)) for g in ref["greedy"])
    if distinct < 8:
        return False
    (d / "reference.json").write_text(json.dumps(ref, separators=(",", ":")) + "\n")
    ratio = max(dev / (0.05 + 0.03 * max(abs(v) for v in row))
                for rows, devs in zip(ref["logits"], ref["w8a8_deviation"]) for row, dev in zip(rows, devs))
    print(f"{name} ({scheme}): greedy margin {ref['min_greedy_margin']:.4f}, distinct tokens >= {distinct}, "
          f"W8A8 bf16 |dlogit| / (0.05 + 0.03 max|logit|) <= {ratio:.3f}")
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/fixtures/models"))
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    out = Path(args.out)
    for name in args.only or FIXTURES:
        seed = 1
        while not build(name, out, seed):
            seed += 1
            if seed > 50:
                raise SystemExit(f"{name}: no seed gave clear greedy margins")


if __name__ == "__main__":
    main()
