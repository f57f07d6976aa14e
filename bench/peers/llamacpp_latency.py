#!/usr/bin/env python3
"""llama.cpp peer for `loom bench latency`: single-stream prefill and decode
speed of llama.cpp (through the llama-cpp-python package, built from source by
pip) on the same GGUF file, prompt and thread count as loom's run.

The context, batch and micro-batch sizes are taken from the run (prompt +
decode tokens), so any prompt length works. The measurement runs in a child
process: llama.cpp's weight-repacking buffer types (its AMX and repacked
kernels) crash on some CPUs (a segfault inside ggml_backend_amx_mul_mat seen
on a 2-core Sapphire-Rapids-class VM), and a crash cannot be caught in-process.
If the default run dies, the measurement is repeated with those buffer types
off (`use_extra_bufts = false`), and the JSON says so.

Prints one JSON object: {"engine": "llama.cpp", "prefill_tokens_per_s", ...}.
"""
import argparse
import json
import subprocess
import sys
import time


def measure(args):
    import numpy as np
    import llama_cpp
    import llama_cpp.llama_cpp as bindings  # what the Llama class calls
    from llama_cpp import Llama

    prompt = [int(x) for x in args.prompt_ids.split(",") if x]
    if not args.extra_bufts:
        default_params = bindings.llama_model_default_params

        def params_without_extra_bufts():
            p = default_params()
            p.use_extra_bufts = False
            return p

        bindings.llama_model_default_params = params_without_extra_bufts
    n_ctx = len(prompt) + args.decode_tokens + 8
    llm = Llama(model_path=args.model, n_threads=args.threads, n_threads_batch=args.threads,
                n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, verbose=False)
    best_prefill = best_decode = 0.0
    for _ in range(args.repeats):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        t1 = time.perf_counter()
        for _ in range(args.decode_tokens):
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            llm.eval([tok])
        t2 = time.perf_counter()
        best_prefill = max(best_prefill, len(prompt) / (t1 - t0))
        best_decode = max(best_decode, args.decode_tokens / (t2 - t1))
    print(json.dumps({
        "engine": "llama.cpp", "version": llama_cpp.__version__, "threads": args.threads,
        "prompt_tokens": len(prompt), "decode_tokens": args.decode_tokens, "n_ctx": n_ctx,
        "extra_buffer_types": bool(args.extra_bufts),
        "prefill_tokens_per_s": round(best_prefill, 2), "decode_tokens_per_s": round(best_decode, 2),
    }))
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-ids", required=True, help="comma-separated token ids")
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--extra-bufts", type=int, choices=(0, 1), default=None,
                    help="measure in this process with llama.cpp's extra buffer types on (1) or off (0)")
    args = ap.parse_args()

    if args.extra_bufts is not None:
        return measure(args)
    try:
        import llama_cpp  # noqa: F401
    except ImportError as e:
        print(json.dumps({"engine": "llama.cpp", "error": f"llama-cpp-python not installed: {e}"}))
        return 0
    notes = []
    for extra in (1, 0):
        cmd = [sys.executable, __file__, "--model", args.model, "--threads", str(args.threads),
               "--prompt-ids", args.prompt_ids, "--decode-tokens", str(args.decode_tokens),
               "--repeats", str(args.repeats), "--extra-bufts", str(extra)]
        out = subprocess.run(cmd, capture_output=True, text=True)
        line = next((l for l in out.stdout.splitlines() if l.startswith("{")), None)
        if out.returncode == 0 and line:
            result = json.loads(line)
            if notes:
                result["note"] = "; ".join(notes)
            print(json.dumps(result))
            return 0
        why = f"signal {-out.returncode}" if out.returncode < 0 else f"exit {out.returncode}"
        notes.append(f"run with extra buffer types {'on' if extra else 'off'} failed ({why})")
    print(json.dumps({"engine": "llama.cpp", "error": "; ".join(notes)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
