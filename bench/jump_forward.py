#!/usr/bin/env python3
"""Jump-forward, same run with and without: two `loom serve` of one model side
by side (the second with --no-jump-forward), and for each JSON schema one
`loom bench serve --json-schema` run against each (unconstrained, then the
same shape of workload under the schema), in A B B A order with --repeats 2
so drift on a shared machine hits both alike. Prints and writes one JSON
object: per schema and server the constrained and unconstrained summaries
(output tok/s, TPOT, E2E), the server's counters over the constrained part
(engine steps, forced tokens verified and accepted), and the with / without
ratios of the constrained part. Greedy outputs are the same on both servers
(jump-forward is exact), so the ratios compare the same tokens.

  python3 bench/jump_forward.py --loom build/cpu/loom --model M \\
      --schema bench/schemas/records.json --schema bench/schemas/orders.json \\
      --bench-args "--dataset fixed --input-len 64 --output-len 96 --num-requests 6 --max-concurrency 1" \\
      [--server-args "--threads 2"] [--second-server-args ...] [--repeats 2] [--output out.json]
"""
import argparse
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time


def start_server(loom, model, args):
    log = tempfile.NamedTemporaryFile("w+", prefix="loom-jf-", suffix=".log", delete=False)
    proc = subprocess.Popen([loom, "serve", "--model", model, "--port", "0", *args], stdout=log, stderr=log)
    deadline = time.time() + 300
    while time.time() < deadline:
        m = re.search(r"listening on http://[^:]+:(\d+)", open(log.name, errors="replace").read())
        if m:
            return proc, f"http://127.0.0.1:{m.group(1)}"
        if proc.poll() is not None:
            sys.exit(f"loom serve exited early:\n{open(log.name).read()}")
        time.sleep(0.2)
    proc.kill()
    sys.exit("loom serve did not start in time")


def bench(loom, url, schema, bench_args, pid):
    out = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
    cmd = [loom, "bench", "serve", "--base-url", url, "--json-schema", schema, "--compile-probes", "0",
           "--server-pid", str(pid), "--output", out, "--json", *shlex.split(bench_args)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def figures(report):
    """The constrained and unconstrained parts' headline figures."""
    s = report["structured"]
    out = {}
    for part in ("unconstrained", "structured"):
        r = s[part]
        counters = r.get("server", {})
        out[part] = {
            "output_tok_s": r["output_tokens_per_s"],
            "tpot_ms_p50": r["tpot_ms"]["p50"],
            "e2e_ms_p50": r["e2e_ms"]["p50"],
            "completed": r["completed"],
            "output_tokens": r["output_tokens"],
            **{k: counters[k] for k in ("engine_steps", "jump_forward_tokens", "jump_forward_accepted_tokens",
                                        "spec_decode_draft_tokens") if k in counters},
        }
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loom", default="build/cpu/loom")
    ap.add_argument("--model", required=True)
    ap.add_argument("--schema", action="append", required=True)
    ap.add_argument("--bench-args", default="--dataset fixed --input-len 64 --output-len 96 --num-requests 6 "
                                            "--max-concurrency 1")
    ap.add_argument("--server-args", default="")
    ap.add_argument("--second-server-args", default=None,
                    help="the --no-jump-forward server's arguments where they must differ: on a GPU, "
                         "--gpu-memory-utilization counts the first server's memory too")
    ap.add_argument("--repeats", type=int, default=1, choices=(1, 2))
    ap.add_argument("--output")
    a = ap.parse_args()
    extra = shlex.split(a.server_args) + ["--max-grammar-compile-ms", "60000"]
    second = extra if a.second_server_args is None else \
        shlex.split(a.second_server_args) + ["--max-grammar-compile-ms", "60000"]
    servers = {"jump_forward": start_server(a.loom, a.model, extra),
               "no_jump_forward": start_server(a.loom, a.model, second + ["--no-jump-forward"])}
    result = {"what": "loom bench serve --json-schema against two servers side by side, with and without "
                      "jump-forward", "model": os.path.basename(a.model), "bench_args": a.bench_args,
              "server_args": a.server_args, "repeats": a.repeats, "machine": platform.node(),
              "cpus": os.cpu_count(), "load_start": os.getloadavg()[0], "schemas": {}}
    try:
        for schema in a.schema:
            runs = {name: [] for name in servers}
            order = ["jump_forward", "no_jump_forward"]
            for rep in range(a.repeats):
                for name in (order if rep % 2 == 0 else order[::-1]):
                    proc, url = servers[name]
                    runs[name].append(figures(bench(a.loom, url, schema, a.bench_args, proc.pid)))
            entry = {name: r if a.repeats > 1 else r[0] for name, r in runs.items()}

            def mean(name, part, key):
                return statistics.mean(r[part][key] for r in runs[name])
            entry["ratio_jump_forward_over_without"] = {
                part: {"output_tok_s": mean("jump_forward", part, "output_tok_s") /
                       mean("no_jump_forward", part, "output_tok_s"),
                       "e2e_ms_p50": mean("jump_forward", part, "e2e_ms_p50") /
                       mean("no_jump_forward", part, "e2e_ms_p50")}
                for part in ("structured", "unconstrained")}
            result["schemas"][os.path.basename(schema)] = entry
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait()
    result["load_end"] = os.getloadavg()[0]
    text = json.dumps(result, indent=1)
    print(text)
    if a.output:
        with open(a.output, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
