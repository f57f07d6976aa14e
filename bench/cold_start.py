#!/usr/bin/env python3
"""Start-up time of `loom serve`: from the process's start to /ready, and to
the first token of a first request (one streamed completion of a few prompt
token ids, max_tokens 1, sent as soon as /ready answers), with the model's
files in the page cache (warm) and out of it (cold: every file of the model
is dropped from the page cache with posix_fadvise(DONTNEED) before the start;
that works without root for pages nobody has dirtied, and `fincore`, where
util-linux has it, reports what stayed cached). Each start is a new process;
warm and cold starts alternate so drift hits both. Prints and writes one JSON
object (per-start figures, then p50 / min / max per kind) and a table.

  python3 bench/cold_start.py --loom build/cpu/loom --model models/qwen2.5-coder-0.5b-instruct.gguf \\
      [--server-args "--device cuda"] [--repeats 3] [--output out.json]
"""
import argparse
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request


def model_files(model):
    if os.path.isdir(model):
        return sorted(os.path.join(d, f) for d, _, fs in os.walk(model) for f in fs)
    return [model]


def drop_from_page_cache(files):
    """posix_fadvise(DONTNEED) on each file; returns the bytes still cached
    afterwards per fincore (None where fincore is missing)."""
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return cached_bytes(files)


def cached_bytes(files):
    if not shutil.which("fincore"):
        return None
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", *files],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return None
    return sum(int(x) for x in out.stdout.split() if x.isdigit())


def get(url, timeout=1.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except Exception:  # not up yet: refused, reset or 503
        return None


def first_token_ms(url, model_name):
    body = json.dumps({"model": model_name, "prompt": [1000, 2000, 3000, 4000], "max_tokens": 1,
                       "temperature": 0, "stream": True}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as r:
        for line in r:
            if line.startswith(b"data: ") and b'"text"' in line:
                return (time.perf_counter() - start) * 1e3
    raise RuntimeError("no token in the stream")


def one_start(loom, model, args, kind):
    files = model_files(model)
    still_cached = drop_from_page_cache(files) if kind == "cold" else cached_bytes(files)
    log = tempfile.NamedTemporaryFile("w+", prefix="loom-start-", suffix=".log", delete=False)
    t0 = time.perf_counter()
    proc = subprocess.Popen([loom, "serve", "--model", model, "--port", "0", "--served-model-name", "m", *args],
                            stdout=log, stderr=log)
    try:
        url = None
        deadline = time.time() + 600
        while time.time() < deadline:
            if proc.poll() is not None:
                sys.exit(f"loom serve exited early:\n{open(log.name, errors='replace').read()}")
            if url is None:
                # The port is bound before the model loads ("bound to HOST:PORT, loading the model").
                m = re.search(r"bound to [^ ]*:(\d+), loading", open(log.name, errors="replace").read())
                if m:
                    url = f"http://127.0.0.1:{m.group(1)}"
                    bound_ms = (time.perf_counter() - t0) * 1e3
            elif get(url + "/ready") == 200:
                break
            time.sleep(0.01)
        else:
            sys.exit("loom serve was not ready in 600 s")
        ready_ms = (time.perf_counter() - t0) * 1e3
        ttft = first_token_ms(url, "m")
        text = open(log.name, errors="replace").read()
        loaded = re.search(r"weights loaded: .* in ([\d.]+) s", text)
        return {"kind": kind, "bound_ms": round(bound_ms, 1), "ready_ms": round(ready_ms, 1),
                "first_request_ttft_ms": round(ttft, 1), "first_token_ms": round(ready_ms + ttft, 1),
                "weights_load_s_logged": float(loaded.group(1)) if loaded else None,
                "model_bytes": sum(os.path.getsize(f) for f in files),
                "page_cached_bytes_at_start": still_cached}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        os.unlink(log.name)


def summary(rows):
    out = {}
    for key in ("bound_ms", "ready_ms", "first_request_ttft_ms", "first_token_ms"):
        v = [r[key] for r in rows]
        out[key] = {"p50": round(statistics.median(v), 1), "min": min(v), "max": max(v)}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loom", default="build/cpu/loom")
    ap.add_argument("--model", required=True)
    ap.add_argument("--server-args", default="")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--output")
    a = ap.parse_args()
    args = shlex.split(a.server_args)
    one_start(a.loom, a.model, args, "warm")  # fills the page cache, and any first-run cost the OS adds
    starts = []
    for _ in range(a.repeats):
        for kind in ("cold", "warm"):
            starts.append(one_start(a.loom, a.model, args, kind))
    version = subprocess.run([a.loom, "--version"], capture_output=True, text=True).stdout.strip()
    result = {"what": "loom serve start-up: process start to /ready and to a first request's first token, "
                      "page cache warm and cold", "model": a.model, "server_args": a.server_args,
              "loom": version, "machine": platform.node(), "cpus": os.cpu_count(), "starts": starts,
              "summary": {kind: summary([s for s in starts if s["kind"] == kind]) for kind in ("warm", "cold")}}
    text = json.dumps(result, indent=1)
    print(text)
    if a.output:
        with open(a.output, "w") as f:
            f.write(text + "\n")
    print("\n| page cache | to port bound ms | to /ready ms | first request TTFT ms | to first token ms |")
    print("| --- | --- | --- | --- | --- |")
    for kind in ("warm", "cold"):
        s = result["summary"][kind]
        print(f"| {kind} | {s['bound_ms']['p50']} | {s['ready_ms']['p50']} | "
              f"{s['first_request_ttft_ms']['p50']} | {s['first_token_ms']['p50']} |")


if __name__ == "__main__":
    main()
