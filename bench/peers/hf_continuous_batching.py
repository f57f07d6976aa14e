#!/usr/bin/env python3
"""The GPU peer: HF transformers' continuous batching (paged attention, sdpa)
over the same workload loom runs (a JSONL from `loom bench workload`: one
{"prompt_ids": [...], "output_len": N} per line), all requests submitted at
once, greedy, every request generating exactly its output_len tokens (EOS
ignored, as loom's benchmarks do).

Prints one JSON line (requests/s, output tokens/s, wall time, peak GPU memory)
in the report format of `loom bench offline`; --output also writes it.

transformers' API moved between releases: the script uses
ContinuousBatchingManager with per-request max_new_tokens when the installed
version has it, else generate_batch() with every request's output length set
to the workload's longest (reported as "uniform_max_new_tokens").
"""
import argparse
import json
import sys
import time


def load_workload(path, limit):
    reqs = []
    with open(path) as f:
        for line in f:
            if line.strip():
                reqs.append(json.loads(line))
            if limit and len(reqs) >= limit:
                break
    return reqs


def load_model(path, torch, impls):
    from transformers import AutoModelForCausalLM

    last = None
    for impl in impls:
        try:
            m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, attn_implementation=impl)
            return m.cuda().eval(), impl
        except Exception as e:  # this release does not know the name
            last = e
    raise SystemExit(f"no paged attention implementation worked ({impls}): {last}")


def run_manager(model, reqs, gen_config, torch):
    """Per-request lengths through the manager API; returns (outputs, mode)."""
    manager = model.init_continuous_batching(generation_config=gen_config)
    manager.start()
    try:
        ids = []
        for i, r in enumerate(reqs):
            rid = f"r{i}"
            manager.add_request(r["prompt_ids"], request_id=rid, max_new_tokens=r["output_len"])
            ids.append(rid)
        done = {}
        deadline = time.time() + 3600
        while len(done) < len(ids) and time.time() < deadline:
            res = manager.get_result(timeout=1)
            if res is not None and getattr(res, "request_id", None) is not None:
                status = str(getattr(res, "status", ""))
                if "FINISHED" in status.upper() or getattr(res, "is_finished", lambda: False)():
                    done[res.request_id] = res
        return done, "manager_per_request"
    finally:
        manager.stop(block=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="HF model directory")
    ap.add_argument("--workload", required=True, help="JSONL from `loom bench workload`")
    ap.add_argument("--num-requests", type=int, default=0, help="first N requests only (0: all)")
    ap.add_argument("--max-batch-tokens", type=int, default=8192)
    ap.add_argument("--output", default="")
    args = ap.parse_args()

    import torch
    import transformers
    from transformers import GenerationConfig

    reqs = load_workload(args.workload, args.num_requests)
    model, impl = load_model(args.model, torch, ["paged|sdpa", "sdpa_paged", "paged_attention"])
    max_out = max(r["output_len"] for r in reqs)
    common = dict(do_sample=False, eos_token_id=-1, pad_token_id=0, max_batch_tokens=args.max_batch_tokens)

    # Warm-up (kernels, allocator) on a few short requests, not timed.
    warm = [{"prompt_ids": r["prompt_ids"][:16], "output_len": 4} for r in reqs[:4]]
    torch.cuda.synchronize()
    mode = None
    try:
        gc = GenerationConfig(max_new_tokens=max_out, **common)
        run_manager(model, warm, gc, torch)
        torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        outs, mode = run_manager(model, reqs, gc, torch)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        out_tokens = sum(len(getattr(o, "generated_tokens", []) or []) for o in outs.values())
        if len(outs) < len(reqs) or out_tokens == 0:
            raise RuntimeError(f"manager finished {len(outs)} of {len(reqs)} requests")
    except Exception as e:
        print(f"hf peer: manager API unusable ({e}); using generate_batch with uniform lengths", file=sys.stderr)
        gc = GenerationConfig(max_new_tokens=max_out, **common)
        model.generate_batch(inputs=[w["prompt_ids"] for w in warm], generation_config=gc)
        torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        outs = model.generate_batch(inputs=[r["prompt_ids"] for r in reqs], generation_config=gc)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        out_tokens = sum(len(o.generated_tokens) for o in outs.values())
        mode = "generate_batch_uniform_max_new_tokens"

    in_tokens = sum(len(r["prompt_ids"]) for r in reqs)
    report = {
        "bench": "offline",
        "engine": "hf-transformers",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "attn_implementation": impl,
        "mode": mode,
        "num_requests": len(reqs),
        "completed": len(outs),
        "wall_s": wall,
        "requests_per_s": len(outs) / wall,
        "input_tokens_per_s": in_tokens / wall,
        "output_tokens_per_s": out_tokens / wall,
        "output_tokens": out_tokens,
        "requested_output_tokens": sum(r["output_len"] for r in reqs),
        "peak_gpu_memory_bytes": torch.cuda.max_memory_allocated(),
        "gpu": torch.cuda.get_device_name(0),
    }
    line = json.dumps(report)
    print(line)
    print(f"| hf {impl} ({mode}) | {len(outs)} req | {wall:.1f} s | {report['requests_per_s']:.2f} req/s | "
          f"{report['output_tokens_per_s']:.0f} out tok/s | peak {report['peak_gpu_memory_bytes'] / 2**30:.1f} GiB |")
    if args.output:
        with open(args.output, "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
