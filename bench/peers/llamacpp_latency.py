#!/usr/bin/env python3
"""llama.cpp peer for `loom bench latency`: single-stream prefill and decode
speed of llama.cpp (through the llama-cpp-python package, built from source by
pip) on the same GGUF file, prompt and thread count as loom's run.

Prints one JSON object: {"engine": "llama.cpp", "prefill_tokens_per_s", ...}.
"""
import argparse
import json
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-ids", required=True, help="comma-separated token ids")
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()

    try:
        import numpy as np
        from llama_cpp import Llama, __version__ as llama_cpp_version
    except ImportError as e:
        print(json.dumps({"engine": "llama.cpp", "error": f"llama-cpp-python not installed: {e}"}))
        return 0

    prompt = [int(x) for x in args.prompt_ids.split(",") if x]
    llm = Llama(model_path=args.model, n_threads=args.threads, n_threads_batch=args.threads,
                n_ctx=len(prompt) + args.decode_tokens + 8, n_batch=max(512, len(prompt)),
                verbose=False)
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
        "engine": "llama.cpp", "version": llama_cpp_version, "threads": args.threads,
        "prompt_tokens": len(prompt), "decode_tokens": args.decode_tokens,
        "prefill_tokens_per_s": round(best_prefill, 2), "decode_tokens_per_s": round(best_decode, 2),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
