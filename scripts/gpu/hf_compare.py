#!/usr/bin/env python3
"""Compares loom's greedy tokens (from `loom generate --json` output files)
with HF transformers on the same HF model directory, on the GPU in bf16.

For each loom output: HF's own greedy continuation of the same prompt, the
first position where they differ, and HF's top-2 logit margin there (a
difference at a near-tie is bf16 rounding, not a bug). Also teacher-forced:
HF's logits along loom's sequence, reporting max |loom choice logit - HF max
logit| (0 when loom always picked HF's argmax).

Prints one JSON line per prompt and a summary; writes them to $OUT/hf_compare.jsonl.
"""
import argparse
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("loom_outputs", nargs="+")
    args = ap.parse_args()
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).cuda().eval()
    out = open(os.path.join(os.environ.get("OUT", "/tmp"), "hf_compare.jsonl"), "a")
    all_ok = True
    for path in args.loom_outputs:
        loom = json.load(open(path))
        prompt, got = loom["prompt_ids"], loom["output_ids"]
        ids = torch.tensor([prompt], device="cuda")
        with torch.no_grad():
            hf = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=len(got),
                                min_new_tokens=len(got), do_sample=False, eos_token_id=None,
                                pad_token_id=0)[0, len(prompt):].tolist()
            full = torch.tensor([prompt + got], device="cuda")
            logits = model(full).logits[0, len(prompt) - 1:-1].float()
        first_diff = next((i for i, (a, b) in enumerate(zip(got, hf)) if a != b), None)
        top2 = logits.topk(2, dim=-1).values
        margin_at_diff = None
        if first_diff is not None:
            margin_at_diff = float(top2[first_diff, 0] - top2[first_diff, 1])
        chosen = logits.gather(1, torch.tensor(got, device="cuda")[:, None])[:, 0]
        gap = float((top2[:, 0] - chosen).max())
        ok = first_diff is None or (margin_at_diff is not None and margin_at_diff < 0.25)
        all_ok &= ok
        rec = {"prompt_len": len(prompt), "tokens": len(got), "identical": first_diff is None,
               "first_diff": first_diff, "hf_top2_margin_at_diff": margin_at_diff,
               "teacher_forced_max_gap": round(gap, 4), "ok": ok}
        print(json.dumps(rec), flush=True)
        out.write(json.dumps(rec) + "\n")
    print(json.dumps({"summary": "all ok" if all_ok else "MISMATCH"}))
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
