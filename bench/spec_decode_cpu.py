#!/usr/bin/env python3
"""Speculative decoding on the CPU, same run with and without: one request at a
time (batch 1) through `loom serve`'s chat API, greedy, streamed, on two
prompt sets: code edits (the answer repeats most of the code in the prompt:
rename a variable, add type hints, add a docstring) and chat questions. For
each prompt: decode tokens/s (completion tokens after the first / time from
the first to the last token), and whether the answers are identical (they
must be). Prints one JSON line and a Markdown table.

  python3 bench/spec_decode_cpu.py --loom build/cpu/loom --model M --threads 2 \\
      --spec "--speculative-method ngram --num-speculative-tokens 4" [--repeats 2] [--output out.json]

The servers run side by side and each prompt goes to each in turn (the order
rotating per prompt and reversed in the second pass of --repeats 2), so drift
on a shared machine hits them alike; each prompt's rate is the mean of its
runs. --loom-before PATH adds a third server, another build's speculation with
the same flags (before/after a change in one run).
"""
import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
import urllib.request

FUNCS = [
    '''def moving_average(values, window):
    result = []
    total = 0.0
    for index, value in enumerate(values):
        total += value
        if index >= window:
            total -= values[index - window]
        if index >= window - 1:
            result.append(total / window)
    return result
''',
    '''def merge_intervals(intervals):
    intervals = sorted(intervals, key=lambda pair: pair[0])
    merged = []
    for start, end in intervals:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged
''',
    '''def word_frequencies(text, stop_words):
    counts = {}
    for raw in text.split():
        word = raw.strip(".,;:!?").lower()
        if not word or word in stop_words:
            continue
        counts[word] = counts.get(word, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return ranked
''',
    '''def binary_search(items, target):
    low = 0
    high = len(items) - 1
    while low <= high:
        middle = (low + high) // 2
        if items[middle] == target:
            return middle
        if items[middle] < target:
            low = middle + 1
        else:
            high = middle - 1
    return -1
''',
]
EDITS = [
    "Rename the variable `total` to `running_sum` in the following function. Reply with the full function only.",
    "Add type hints to the following function. Reply with the full function only.",
    "Rename the variable `counts` to `frequency` in the following function. Reply with the full function only.",
    "Add a docstring to the following function. Reply with the full function only.",
]
CHAT = [
    "What are the main differences between TCP and UDP? Answer in a short paragraph.",
    "Give three tips for writing readable Python code.",
    "Explain what a hash table is to a beginner.",
]


def prompts():
    out = []
    for i, f in enumerate(FUNCS):
        out.append(("code", f"{EDITS[i]}\n\n```python\n{f}```"))
    for q in CHAT:
        out.append(("chat", q))
    return out


def wait_ready(port, proc, timeout=600):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"loom serve exited with {proc.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2)
            return
        except Exception:
            time.sleep(0.5)
    raise SystemExit("loom serve did not become ready")


def one(port, text, max_tokens):
    body = {"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first = last = None
    tokens = []
    usage = None
    with urllib.request.urlopen(req, timeout=3600) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for c in chunk.get("choices", []):
                piece = (c.get("delta") or {}).get("content")
                if piece:
                    now = time.perf_counter()
                    first = first if first is not None else now
                    last = now
                    tokens.append(piece)
    n = usage["completion_tokens"] if usage else len(tokens)
    rate = (n - 1) / (last - first) if n > 1 and last > first else 0.0
    return {"text": "".join(tokens), "completion_tokens": n, "decode_tok_s": rate, "ttft_s": (first or t0) - t0}


def start_server(args, extra, port, loom=None):
    cmd = [loom or args.loom, "serve", "--model", args.model, "--threads", str(args.threads), "--port", str(port),
           "--served-model-name", "m", "--disable-log-requests"] + extra
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(port, proc)
    one(port, "Say hello.", 8)  # warm: the weights paged in, the first steps measured
    return proc


def spec_metrics(port):
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    spec = {}
    for line in metrics.splitlines():
        if line.startswith("loom_spec_decode_") and " " in line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            if "{" not in name:
                spec[name] = float(value)
    return spec


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loom", default="build/cpu/loom")
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--spec", default="--speculative-method ngram --num-speculative-tokens 4")
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--repeats", type=int, default=1, choices=[1, 2])
    ap.add_argument("--port", type=int, default=18555)
    ap.add_argument("--loom-before", help="another build's loom: its speculation measured in the same run")
    ap.add_argument("--output")
    args = ap.parse_args()
    names = ["plain", "spec"] + (["before"] if args.loom_before else [])
    # Every server runs at once (idle ones cost nothing); each prompt goes to
    # each of them in turn, the order rotating, so load drift on a shared
    # machine hits them alike.
    procs = {}
    try:
        for n, name in enumerate(names):
            extra = shlex.split(args.spec) if name != "plain" else []
            procs[name] = (start_server(args, extra, args.port + n, args.loom_before if name == "before" else None),
                           args.port + n)
        runs = {name: [[] for _ in range(args.repeats)] for name in names}
        order = []
        for rep in range(args.repeats):
            for i, (_, text) in enumerate(prompts()):
                turn = names[(i + rep) % len(names):] + names[:(i + rep) % len(names)]
                if rep % 2:
                    turn = turn[::-1]
                order.append(turn)
                for name in turn:
                    runs[name][rep].append(one(procs[name][1], text, args.max_tokens))
            print(f"spec_decode_cpu: pass {rep + 1} done", file=sys.stderr)
        metrics = {name: spec_metrics(port) for name, (_, port) in procs.items() if name != "plain"}
    finally:
        for proc, _ in procs.values():
            proc.terminate()
            proc.wait()
    rows = []
    for i, (kind, _) in enumerate(prompts()):
        plain = [r[i] for r in runs["plain"]]
        spec = [r[i] for r in runs["spec"]]
        p = statistics.mean(r["decode_tok_s"] for r in plain)
        s = statistics.mean(r["decode_tok_s"] for r in spec)
        before = [r[i] for r in runs.get("before", [])]
        same = all(r["text"] == plain[0]["text"] for r in plain + spec + before)
        row = {"prompt": i, "kind": kind, "tokens": plain[0]["completion_tokens"], "plain_tok_s": round(p, 2),
               "spec_tok_s": round(s, 2), "speedup": round(s / p, 3) if p else None, "identical": same}
        if before:
            b = statistics.mean(r["decode_tok_s"] for r in before)
            row.update({"before_tok_s": round(b, 2), "before_speedup": round(b / p, 3) if p else None})
        rows.append(row)
    summary = {}
    for kind in ("code", "chat"):
        sel = [r for r in rows if r["kind"] == kind]
        summary[kind] = {"plain_tok_s": round(statistics.mean(r["plain_tok_s"] for r in sel), 2),
                         "spec_tok_s": round(statistics.mean(r["spec_tok_s"] for r in sel), 2)}
        summary[kind]["speedup"] = round(summary[kind]["spec_tok_s"] / summary[kind]["plain_tok_s"], 3)
        if args.loom_before:
            summary[kind]["before_tok_s"] = round(statistics.mean(r["before_tok_s"] for r in sel), 2)
            summary[kind]["before_speedup"] = round(summary[kind]["before_tok_s"] / summary[kind]["plain_tok_s"], 3)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    report = {"what": "speculative decoding on the CPU, batch 1, greedy chat completions, same run with and without",
              "model": args.model, "threads": args.threads, "spec_flags": args.spec, "max_tokens": args.max_tokens,
              "order": order, "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
              "load_average": os.getloadavg(), "commit": commit, "loom_before": args.loom_before, "summary": summary, "spec_metrics": metrics,
              "prompts": rows, "all_identical": all(r["identical"] for r in rows)}
    print(json.dumps(report))
    print("\n| prompt | kind | tokens | plain tok/s | spec tok/s | speedup | before tok/s | before speedup | identical |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['prompt']} | {r['kind']} | {r['tokens']} | {r['plain_tok_s']} | {r['spec_tok_s']} | "
              f"{r['speedup']} | {r.get('before_tok_s', '')} | {r.get('before_speedup', '')} | {r['identical']} |")
    for kind, v in summary.items():
        print(f"| mean | {kind} | | {v['plain_tok_s']} | {v['spec_tok_s']} | {v['speedup']} | "
              f"{v.get('before_tok_s', '')} | {v.get('before_speedup', '')} | |")
    if args.output:
        with open(args.output, "w") as f:
            json.dump(report, f, indent=1)
    return 0 if report["all_identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
