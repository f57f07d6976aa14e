#!/usr/bin/env python3
"""Builds tests/fixtures/real/<model>.json: HF transformers' reference outputs
for the real default GGUF models (scripts/fetch_model.sh), read by
tests/model/test_real_models.cpp.

transformers loads a GGUF by dequantising every tensor to float32, so the
reference is the quantised model's weights run in fp32 (loom instead quantises
activations to 8 bits for its integer dot products, so near-ties may flip).
For each prompt the fixture holds:
  prompt       token ids (HF tokenizer; BOS prepended iff the GGUF's
               tokenizer.ggml.add_bos_token says so, as loom does)
  greedy       HF's greedy continuation (NEW_TOKENS, do_sample=False,
               all-ones attention mask) and each token's decoded piece
  margins      teacher-forced along prompt + greedy: at each generated
               position, top-1 minus top-2 logit (the row whose argmax is
               greedy[i]); forced_top2_* hold those two tokens and logits
  last_top     at the last prompt position, HF's TOP_K tokens and logits
plus the transformers/torch/gguf versions, the model file's SHA-256 and size,
and a few 32-byte samples of the file (what the C++ test checks).

Usage: python3 scripts/make_real_model_fixtures.py [--models models] [--out tests/fixtures/real]
Requires: torch, transformers, gguf, accelerate (PyPI). Loading one model takes
a minute or two on a small CPU machine.
"""

import argparse
import hashlib
import importlib.metadata
import json
import os
import tempfile
from pathlib import Path

import torch
from gguf import GGUFReader
from transformers import AutoModelForCausalLM, AutoTokenizer

NEW_TOKENS = 24
TOP_K = 20
PROBE_BYTES = 32

LONG_TEXT = (
    "The history of computing is a story of steadily shrinking machines. Early computers filled "
    "entire rooms and consumed enormous amounts of power, yet they could perform only a few "
    "thousand operations per second. The invention of the transistor and later the integrated "
    "circuit changed everything, and within a few decades"
)

# name -> (GGUF file, [(prompt label, kind, text)]); kind "chat" renders the
# text as one user message through the tokenizer's chat template. EXPECT names
# text that HF's continuation must contain (checked here, and by the C++ test
# on loom's).
MODELS = {
    "qwen2.5-coder-0.5b": ("qwen2.5-coder-0.5b-instruct.gguf", [
        ("paris", "text", "The capital of France is"),
        ("code", "text", "def fibonacci(n):"),
        ("chat", "chat", "Write a Python function that checks whether a number is prime."),
        ("long", "text", LONG_TEXT),
        ("german", "text", "Die Hauptstadt von Deutschland ist"),
    ]),
    "gemma3-270m": ("gemma-3-270m-q4_k_m.gguf", [
        ("paris", "text", "The capital of France is"),
        ("code", "text", "def fibonacci(n):"),
        ("long", "text", LONG_TEXT),
        ("french", "text", "La capitale de l'Allemagne est"),
    ]),
}


EXPECT = {("qwen2.5-coder-0.5b", "paris"): "Paris"}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def probes(path: Path) -> list:
    """32-byte samples at fixed fractions of the file: a cheap identity check
    for the C++ test (which does not hash 500 MB)."""
    size = path.stat().st_size
    out = []
    with open(path, "rb") as f:
        for offset in (0, size // 4, size // 2, 3 * size // 4, size - PROBE_BYTES):
            f.seek(offset)
            out.append({"offset": offset, "hex": f.read(PROBE_BYTES).hex()})
    return out


def gguf_add_bos(path: Path) -> bool:
    reader = GGUFReader(str(path))
    field = reader.fields.get("tokenizer.ggml.add_bos_token")
    return bool(field.parts[field.data[0]][0]) if field is not None else False


def prompt_ids(tok, kind: str, text: str, add_bos: bool) -> list:
    if kind == "chat":
        text = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                       add_generation_prompt=True)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if add_bos and (not ids or ids[0] != tok.bos_token_id):
        ids = [tok.bos_token_id] + ids
    return ids


@torch.no_grad()
def reference(model, tok, ids: list) -> dict:
    inp = torch.tensor([ids])
    out = model.generate(inp, attention_mask=torch.ones_like(inp), max_new_tokens=NEW_TOKENS,
                         min_new_tokens=NEW_TOKENS, do_sample=False, temperature=None, top_p=None,
                         top_k=None, pad_token_id=tok.pad_token_id or 0)
    greedy = out[0, len(ids):].tolist()
    assert len(greedy) == NEW_TOKENS, greedy

    # Teacher-forced along prompt + greedy: row len(ids)-1+i predicts greedy[i].
    full = torch.tensor([ids + greedy])
    logits = model(full, attention_mask=torch.ones_like(full)).logits[0].float()
    rows = logits[len(ids) - 1: len(ids) - 1 + NEW_TOKENS]
    top2 = rows.topk(2, dim=-1)
    mismatched = [i for i in range(NEW_TOKENS) if int(top2.indices[i, 0]) != greedy[i]]
    if mismatched:
        print(f"  note: teacher-forced argmax differs from generate() at {mismatched}")
    margins = (top2.values[:, 0] - top2.values[:, 1]).tolist()
    last = logits[len(ids) - 1].topk(TOP_K)
    return {
        "prompt": ids,
        "greedy": greedy,
        "greedy_pieces": [tok.decode([t]) for t in greedy],
        "greedy_text": tok.decode(greedy),
        "margins": [round(m, 5) for m in margins],
        "forced_top2_ids": top2.indices.tolist(),
        "forced_top2_logits": [[round(v, 5) for v in pair] for pair in top2.values.tolist()],
        "last_top_ids": last.indices.tolist(),
        "last_top_logits": [round(v, 5) for v in last.values.tolist()],
    }


def main() -> None:
    root = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=str(root / "models"))
    ap.add_argument("--out", default=str(root / "tests/fixtures/real"))
    ap.add_argument("--only", default=None, help="one model name")
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))

    for name, (file, prompts) in MODELS.items():
        if args.only and name != args.only:
            continue
        path = Path(args.models) / file
        if not path.exists():
            print(f"{name}: {path} absent (scripts/fetch_model.sh {name}); skipped")
            continue
        add_bos = gguf_add_bos(path)
        with tempfile.TemporaryDirectory() as tmp:
            os.symlink(path.resolve(), Path(tmp) / file)
            tok = AutoTokenizer.from_pretrained(tmp, gguf_file=file)
            model = AutoModelForCausalLM.from_pretrained(tmp, gguf_file=file, dtype=torch.float32)
        model.eval()
        entries = []
        for label, kind, text in prompts:
            r = reference(model, tok, prompt_ids(tok, kind, text, add_bos))
            print(f"{name}/{label}: {len(r['prompt'])} prompt tokens -> {r['greedy_text']!r}"
                  f" (min margin {min(r['margins']):.4f})")
            entry = {"name": label, **r}
            if (name, label) in EXPECT:
                entry["expect_text"] = EXPECT[(name, label)]
                assert entry["expect_text"] in r["greedy_text"], (name, label, r["greedy_text"])
            entries.append(entry)
        fixture = {
            "model": name,
            "file": file,
            "sha256": sha256(path),
            "size": path.stat().st_size,
            "probes": probes(path),
            "add_bos": add_bos,
            "new_tokens": NEW_TOKENS,
            "versions": {p: importlib.metadata.version(p) for p in ("transformers", "torch", "gguf")},
            "prompts": entries,
        }
        (out_dir / f"{name}.json").write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {out_dir / (name + '.json')}")


if __name__ == "__main__":
    main()
