#!/usr/bin/env python3
"""loom against llama.cpp on the CPU, interleaved and repeated, for a noisy
(shared) machine: every repeat runs `loom bench latency --peer llama.cpp` at
each prompt length (loom, then llama.cpp on the same GGUF, prompt and
threads), then the batched-decode sweep, then TTFT of a chat prompt through
`loom serve` over HTTP. Prints and writes one JSON with every sample and, per
figure, min / median / max over the repeats, plus the machine (CPU, nproc,
ISA, load average before and after). Before every latency and batch sample it
reads 256 MiB on --threads threads (numpy, where installed) and records the
rate as host_read_gbs: single-stream decode streams every weight once per
token, so on a host whose memory bandwidth moves (a shared VM) that rate,
not the code, sets how fast it can go. It is a gauge of the host's state
between samples, not a bound: numpy's read on 4 KB pages runs below what
loom's prefetching kernels on huge pages reach (on the 2-core EPYC VM,
43.5 GB/s just before a decode that streamed 392 MB a token at 130.6 tok/s,
51 GB/s).

  python3 bench/cpu_vs_llamacpp.py --loom build/cpu/loom \\
      --model models/qwen2.5-coder-0.5b-instruct.gguf --threads 2 --repeats 3 \\
      --output bench/results/cpu_vs_llamacpp_2core.json
"""
import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import urllib.request


def run_json(cmd, env=None):
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        return {"error": f"exit {out.returncode}: {out.stderr.strip()[-400:]}"}
    try:
        return json.loads(out.stdout)
    except json.JSONDecodeError:
        pass
    for line in out.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return {"error": "no JSON in the output"}


def spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "n": len(values)}


def machine(loom):
    env = run_json([loom, "env", "--json"])
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    return {"host": socket.gethostname(), "cpu": cpu, "nproc": os.cpu_count(), "platform": platform.platform(),
            "loom_env": env, "commit": commit, "date": datetime.datetime.now().isoformat(timespec="seconds")}


_probe_buffer = None


def host_read_gbs(threads, passes=5):
    """Best rate of a plain parallel read of 256 MiB (GB/s), None without numpy."""
    global _probe_buffer
    try:
        import threading
        import numpy as np
    except ImportError:
        return None
    if _probe_buffer is None:
        _probe_buffer = np.ones(64 << 20, dtype=np.int32)
    parts = np.array_split(_probe_buffer, max(1, threads))
    best = float("inf")
    for _ in range(passes):
        # numpy releases the GIL in the reduction, so the threads read in parallel.
        workers = [threading.Thread(target=np.bitwise_xor.reduce, args=(p,)) for p in parts]
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        best = min(best, time.perf_counter() - t0)
    return round(_probe_buffer.nbytes / best / 1e9, 1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_ttft(args):
    """TTFT of a --chat-len-token chat question through `loom serve` (HTTP)."""
    port = free_port()
    server = subprocess.Popen([args.loom, "serve", "--model", args.model, "--threads", str(args.threads),
                               "--port", str(port), "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                urllib.request.urlopen(base + "/health", timeout=1).read()
                break
            except OSError:
                time.sleep(0.2)
        out = f"/tmp/loom_ttft_{port}.json"
        r = run_json([args.loom, "bench", "serve", "--base-url", base, "--endpoint", "chat", "--dataset", "fixed",
                      "--input-len", str(args.chat_len), "--output-len", "8", "--num-requests",
                      str(args.ttft_requests), "--max-concurrency", "1", "--warmup", "2", "--output", out])
        if "error" in r:
            return r
        ttft = r.get("ttft_ms", {})
        return {"ttft_ms": ttft, "input_tokens": r.get("input_tokens"), "requests": r.get("completed")}
    finally:
        server.terminate()
        server.wait(timeout=30)


def summarise(report, lens):
    """min / median / max of every figure over the samples so far."""
    summary = {}
    lat = [s for s in report["samples"] if s["stage"] == "latency"]
    for n in lens:
        rows = [s for s in lat if s["input_len"] == n]
        summary[f"prefill_{n}"] = {k: spread([s[k] for s in rows]) for k in
                                   ("loom_prefill_tok_s", "peer_prefill_tok_s", "ratio_prefill")}
        summary[f"decode_after_{n}"] = {k: spread([s[k] for s in rows]) for k in
                                        ("loom_decode_tok_s", "peer_decode_tok_s", "ratio_decode")}
        reads = [s.get("host_read_gbs") for s in rows if s.get("host_read_gbs")]
        if reads:
            summary[f"decode_after_{n}"]["host_read_gbs"] = spread(reads)
    bat = [s for s in report["samples"] if s["stage"] == "batch"]
    if bat:
        sizes = sorted({int(b) for s in bat for b in s["decode_tok_s"]})
        summary["batch_decode_tok_s"] = {b: spread([s["decode_tok_s"].get(str(b), s["decode_tok_s"].get(b))
                                                    for s in bat]) for b in sizes}
        summary["batch_scaling"] = {b: spread([s["scaling"].get(str(b), s["scaling"].get(b)) for s in bat])
                                    for b in sizes}
    srv = [s for s in report["samples"] if s["stage"] == "serve" and "ttft_ms" in s]
    if srv:
        summary["serve_ttft_ms_p50"] = spread([s["ttft_ms"].get("p50") for s in srv])
        summary["serve_prompt_tokens"] = spread([s["input_tokens"] / s["requests"] for s in srv
                                                 if s.get("input_tokens") and s.get("requests")])
    return summary


def write(report, lens, path, final=False):
    """Rewrites the report (after every sample, so an interrupted run keeps what it measured)."""
    report["load_now"] = os.getloadavg()
    report["complete"] = final
    report["summary"] = summarise(report, lens)
    if path:
        with open(path, "w") as f:
            f.write(json.dumps(report, indent=1) + "\n")
    if final:
        print(json.dumps(report["summary"], indent=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loom", default="build/cpu/loom")
    ap.add_argument("--model", default="models/qwen2.5-coder-0.5b-instruct.gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--input-lens", default="32,128,512")
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--batch-sizes", default="1,4,16,64")
    ap.add_argument("--batch-input-len", type=int, default=64)
    ap.add_argument("--chat-len", type=int, default=35, help="prompt tokens of the TTFT chat question")
    ap.add_argument("--ttft-requests", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip", default="", help="comma-separated stages to skip: latency,batch,serve")
    ap.add_argument("--output")
    ap.add_argument("--from-samples", help="rebuild the report from a run's stderr sample lines (JSON per line)")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    lens = [int(x) for x in args.input_lens.split(",") if x]

    report = {"machine": machine(args.loom), "threads": args.threads, "model": args.model,
              "output_len": args.output_len, "load_before": os.getloadavg(), "samples": []}
    if args.from_samples:
        with open(args.from_samples) as f:
            report["samples"] = [json.loads(l) for l in f if l.strip().startswith("{")]
        report["load_before"] = None
        write(report, lens, args.output, final=True)
        return 0
    for rep in range(args.repeats):
        if "latency" not in skip:
            for n in lens:
                read = host_read_gbs(args.threads)
                r = run_json([args.loom, "bench", "latency", "--model", args.model, "--threads", str(args.threads),
                              "--input-len", str(n), "--output-len", str(args.output_len), "--peer", "llama.cpp",
                              "--seed", str(1 + rep), "--json"])
                peer = r.get("peer", {})
                report["samples"].append({
                    "stage": "latency", "repeat": rep, "input_len": n, "load": os.getloadavg()[0],
                    "host_read_gbs": read,
                    "loom_prefill_tok_s": r.get("prefill_tokens_per_s"), "loom_ttft_ms": r.get("ttft_ms"),
                    "loom_decode_tok_s": r.get("decode_tokens_per_s_batch1"),
                    "peer_prefill_tok_s": peer.get("prefill_tokens_per_s"),
                    "peer_decode_tok_s": peer.get("decode_tokens_per_s"),
                    "peer_version": peer.get("version"), "peer_error": peer.get("error") or r.get("error"),
                    "ratio_prefill": r.get("ratio_prefill_loom_over_peer"),
                    "ratio_decode": r.get("ratio_decode_loom_over_peer")})
                print(json.dumps(report["samples"][-1]), file=sys.stderr)
                write(report, lens, args.output)
        if "batch" not in skip:
            read = host_read_gbs(args.threads)
            r = run_json([args.loom, "bench", "latency", "--model", args.model, "--threads", str(args.threads),
                          "--input-len", str(args.batch_input_len), "--output-len", str(args.output_len),
                          "--batch-sizes", args.batch_sizes, "--seed", str(1 + rep), "--json"])
            by = {d["batch"]: d["decode_tokens_per_s"] for d in r.get("decode", [])}
            report["samples"].append({"stage": "batch", "repeat": rep, "load": os.getloadavg()[0],
                                      "host_read_gbs": read,
                                      "decode_tok_s": by, "error": r.get("error"),
                                      "scaling": {b: round(v / by[1], 2) for b, v in by.items() if by.get(1)}})
            print(json.dumps(report["samples"][-1]), file=sys.stderr)
            write(report, lens, args.output)
        if "serve" not in skip:
            r = serve_ttft(args)
            report["samples"].append({"stage": "serve", "repeat": rep, "load": os.getloadavg()[0], **r})
            print(json.dumps(report["samples"][-1]), file=sys.stderr)
            write(report, lens, args.output)
    write(report, lens, args.output, final=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
