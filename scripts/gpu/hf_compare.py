#!/usr/bin/env python3
"""Compares loom's greedy tokens (from `loom generate --json` output files)
with HF transformers on the same HF model directory, on the GPU in bf16.

For each loom output: HF's own greedy continuation of the same prompt, the
first position where they differ, and HF's top-2 logit margin there (a
difference at a near-tie is bf16 rounding, not a bug). Also teacher-forced:
HF's logits along loom's sequence, reporting max |loom choice logit - HF max
logit| (0 when loom always picked HF's argmax).

Prints one JSON line per prompt and a summary; writes them to $OUT/hf_compare.jsonl.

FP8 checkpoints (--dequantize-fp8): HF runs the checkpoint's dequantised
weights (fp8 * scale, scripts/fp8_checkpoint.py) in bf16, with unquantised
activations. With --requests (the `loom generate --batch-file` input: one
{"id", "prompt": [ids], "max_tokens", "logprobs"} per line) and --batch (its
output, with logprobs), HF is teacher-forced along each of loom's greedy
sequences: per prompt, the tokens where loom's choice is HF's argmax, HF's
top-2 margin where it is not, and |loom logprob - HF logprob| of loom's
tokens. A prompt is ok when every disagreement is at an HF margin below
--near-tie (default 1.0: W8A8 activations move logits more than bf16 does).
--bf16-batch (loom's output for the same requests on the bf16 model) adds
the greedy agreement of the two: the share of the tokens before each
prompt's first difference, and the position-wise share.
"""
import argparse
import json
import os
import sys


def load_model(path, dequantize_fp8):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    if not dequantize_fp8:
        return AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).cuda().eval()
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import fp8_checkpoint
    from safetensors.torch import load_file
    config = AutoConfig.from_pretrained(path)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    tensors = {}
    for f in sorted(os.listdir(path)):
        if f.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(path, f), device="cuda"))
    state = fp8_checkpoint.dequantized_state_dict(tensors, torch.bfloat16)
    del tensors
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing[:5], unexpected[:5])
    if config.tie_word_embeddings:
        model.tie_weights()
    return model.eval()


def compare_batch(model, args, out):
    """FP8 model (loom) vs HF on the dequantised weights, teacher-forced."""
    import torch
    requests = {}
    for line in open(args.requests):
        body = json.loads(line)
        requests[str(body["id"])] = body["prompt"]
    loom = {str(j["id"]): j for j in map(json.loads, open(args.batch)) if "output_ids" in j}
    bf16 = {str(j["id"]): j for j in map(json.loads, open(args.bf16_batch))} if args.bf16_batch else {}
    all_ok, agree, total, prefix, positionwise, max_dlp = True, 0, 0, 0, 0, 0.0
    for rid, prompt in requests.items():
        got = loom[rid]["output_ids"]
        full = torch.tensor([prompt + got], device="cuda")
        with torch.no_grad():
            logits = model(full).logits[0, len(prompt) - 1:-1].float()
        lp = torch.log_softmax(logits, -1)
        top2 = logits.topk(2, dim=-1)
        hf_arg = top2.indices[:, 0].tolist()
        margins = (top2.values[:, 0] - top2.values[:, 1]).tolist()
        diffs = [i for i, (a, b) in enumerate(zip(got, hf_arg)) if a != b]
        dlp = [abs(t["logprob"] - float(lp[i, t["token"]])) for i, t in enumerate(loom[rid].get("logprobs", []))]
        ok = all(margins[i] < args.near_tie for i in diffs)
        all_ok &= ok
        agree += len(got) - len(diffs)
        total += len(got)
        max_dlp = max([max_dlp] + dlp)
        rec = {"id": rid, "prompt_len": len(prompt), "tokens": len(got), "hf_argmax_agree": len(got) - len(diffs),
               "hf_margins_at_disagreements": [round(margins[i], 3) for i in diffs][:8],
               "max_abs_dlogprob": round(max(dlp), 4) if dlp else None, "ok": ok}
        if rid in bf16:
            other = bf16[rid]["output_ids"]
            common = next((i for i, (a, b) in enumerate(zip(got, other)) if a != b), min(len(got), len(other)))
            rec["bf16_common_prefix"] = common
            prefix += common
            positionwise += sum(a == b for a, b in zip(got, other))
        print(json.dumps(rec), flush=True)
        out.write(json.dumps(rec) + "\n")
    summary = {"summary": "all ok" if all_ok else "MISMATCH", "prompts": len(requests),
               "hf_argmax_agreement": round(agree / max(total, 1), 4), "max_abs_dlogprob": round(max_dlp, 4),
               "near_tie": args.near_tie}
    if bf16:
        summary["greedy_agreement_with_bf16_prefix"] = round(prefix / max(total, 1), 4)
        summary["greedy_agreement_with_bf16_positionwise"] = round(positionwise / max(total, 1), 4)
    print(json.dumps(summary))
    out.write(json.dumps(summary) + "\n")
    return 0 if all_ok else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--dequantize-fp8", action="store_true", help="HF on an FP8 checkpoint's dequantised weights")
    ap.add_argument("--requests", help="loom generate --batch-file input (with --batch)")
    ap.add_argument("--batch", help="its output, with logprobs")
    ap.add_argument("--bf16-batch", help="loom's output for the same requests on the bf16 model")
    ap.add_argument("--near-tie", type=float, default=1.0)
    ap.add_argument("loom_outputs", nargs="*")
    args = ap.parse_args()
    import torch

    model = load_model(args.model, args.dequantize_fp8)
    out = open(os.path.join(os.environ.get("OUT", "/tmp"), "hf_compare.jsonl"), "a")
    if args.batch:
        return compare_batch(model, args, out)
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
