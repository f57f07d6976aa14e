#!/usr/bin/env python3
"""Builds tests/fixtures/models/qwen2_embed: a tiny seeded random-weight Qwen2
decoder saved by HF transformers, laid out as a sentence-transformers
embedding model (modules.json: Transformer, Pooling with mean tokens,
Normalize), and `embeddings.json` beside it: prompts (token ids) and HF's
embeddings of each, pooled from the final-norm hidden states
(`last_hidden_state` of the base model) by last token, mean and first (cls)
token, L2-normalised, plus the unnormalised mean.

The C++ test (tests/engine/test_embedding_reference.cpp) runs the same
prompts through loom's engine, batched together, and compares.

Usage: python3 scripts/make_embedding_fixtures.py [--out tests/fixtures/models]
Requires: torch, transformers, safetensors (PyPI).
"""

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
import transformers
from transformers import AutoModel, AutoModelForCausalLM, Qwen2Config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_model_fixtures import randomize  # noqa: E402  (the same O(1)-activation init)

VOCAB = 256
SEED = 4242
PROMPT_LENGTHS = (1, 3, 9, 17, 30, 47)


def pool(hidden, kind):
    if kind == "last":
        return hidden[-1]
    if kind == "cls":
        return hidden[0]
    return hidden.mean(0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/fixtures/models"))
    args = ap.parse_args()
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    config = Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         rms_norm_eps=1e-6, tie_word_embeddings=True,
                         rope_parameters=dict(rope_type="default", rope_theta=1000000.0))
    config._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32).eval()
    randomize(model, gen, gemma=False, tied=True)

    d = Path(args.out) / "qwen2_embed"
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d, safe_serialization=True)
    cfg_path = d / "config.json"
    cfg = json.loads(cfg_path.read_text())
    for k in ["dtype", "torch_dtype", "transformers_version"] + [k for k in cfg if k.startswith("_")]:
        cfg.pop(k, None)
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    (d / "generation_config.json").unlink(missing_ok=True)
    # sentence-transformers' layout: the Transformer module is the directory itself.
    (d / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ], indent=2) + "\n")
    (d / "1_Pooling").mkdir()
    (d / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": config.hidden_size, "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False, "include_prompt": True}, indent=2) + "\n")

    # References from the base model as HF reads it back from the directory.
    base = AutoModel.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager").eval()
    prompts = [torch.randint(0, VOCAB, (n,), generator=gen).tolist() for n in PROMPT_LENGTHS]
    ref = {"prompts": prompts, "last": [], "mean": [], "cls": [], "mean_unnormalized": [],
           "torch": torch.__version__, "transformers": transformers.__version__, "seed": SEED}
    with torch.no_grad():
        for ids in prompts:
            hidden = base(torch.tensor([ids])).last_hidden_state[0].float()
            for kind in ("last", "mean", "cls"):
                v = torch.nn.functional.normalize(pool(hidden, kind), dim=0)
                ref[kind].append([float(f"{x:.8g}") for x in v.tolist()])
            ref["mean_unnormalized"].append([float(f"{x:.8g}") for x in pool(hidden, "mean").tolist()])
    (d / "embeddings.json").write_text(json.dumps(ref, separators=(",", ":")) + "\n")
    print(f"qwen2_embed: {len(prompts)} prompts, hidden {config.hidden_size}")


if __name__ == "__main__":
    main()
