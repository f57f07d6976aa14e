#!/usr/bin/env python3
"""Makes a Llama-3-architecture model with random bf16 weights as an HF
directory (config.json, model.safetensors shards + index, tokenizer.json,
tokenizer_config.json, generation_config.json), so loom and HF transformers
load the same files. No hub access needed.

  python3 scripts/gpu/make_random_model.py --shape small --out /tmp/llama-small
  python3 scripts/gpu/make_random_model.py --shape 8b --out /tmp/llama-8b

The tokenizer is a byte-level BPE whose vocabulary is the 256 byte symbols,
the model's special tokens and filler tokens up to the vocabulary size (no
merges): text round-trips byte by byte; benchmarks use token ids directly.
"""
import argparse
import json
import os

SHAPES = {
    # Llama-3-8B: hidden 4096, MLP 14336, 32 layers, 32 q / 8 kv heads, vocab 128256
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=8, vocab_size=128256),
    "small": dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=4,
                  num_attention_heads=8, num_key_value_heads=2, vocab_size=128256),
    # Qwen2.5-0.5B-shaped but Llama architecture (for the small-request rate test)
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2, vocab_size=151936),
    # The same with the 8B shape's vocabulary: a draft model for it (speculative decoding)
    "0.5b-draft": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                       num_attention_heads=14, num_key_value_heads=2, vocab_size=128256),
}


def byte_symbols():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def write_tokenizer(out, vocab_size):
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    vocab = {}
    for s in byte_symbols():
        vocab[s] = len(vocab)
    i = 0
    while len(vocab) < vocab_size - len(specials):
        vocab[f"<filler_{i}>"] = len(vocab)
        i += 1
    added = []
    for s in specials:
        added.append({"id": len(vocab), "content": s, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True})
        vocab[s] = len(vocab)
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": True, "vocab": vocab, "merges": []},
    }
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": specials[0], "eos_token": specials[2], "add_bos_token": True,
                   "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 8192,
                   "chat_template": "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n"
                                    "{{ m['content'] }}<|eot_id|>{% endfor %}"
                                    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"}, f)
    return vocab[specials[0]], vocab[specials[1]], vocab[specials[2]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=sorted(SHAPES), default="small")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    os.makedirs(args.out, exist_ok=True)
    shape = SHAPES[args.shape]
    bos, eos, eot = write_tokenizer(args.out, shape["vocab_size"])
    cfg = LlamaConfig(**shape, max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=500000.0,
                      rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                      bos_token_id=bos, eos_token_id=[eos, eot], tie_word_embeddings=False,
                      torch_dtype="bfloat16")
    torch.manual_seed(args.seed)
    with torch.device(args.device):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    # Default init (std 0.02) gives tiny logits; scale so the random model has
    # a peaked, non-trivial next-token distribution like a trained one.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.fill_(1.0)
    model.save_pretrained(args.out, safe_serialization=True, max_shard_size="5GB")
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": bos, "eos_token_id": [eos, eot], "do_sample": False}, f)
    print(json.dumps({"out": args.out, "shape": args.shape, **shape}))


if __name__ == "__main__":
    main()
