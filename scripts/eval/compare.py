#!/usr/bin/env python3
"""Compares two lm-evaluation-harness runs of the same tasks (loom's
`local-completions` and transformers' `hf`, written by run_lm_eval.sh under
OUT/loom and OUT/hf): prints each metric with its standard error, the
difference and how many examples scored differently, and the largest
log-likelihood gap per choice. Copies each run's results JSON and writes
comparison.json to RESULTS. Exits 1 when a score differs by more than twice
the standard error of the difference of two independent estimates.

Usage: compare.py OUT RESULTS
"""
import glob
import json
import math
import os
import sys

SIDES = ("loom", "hf")
METRICS = {"loom_mc": ["acc", "acc_norm"], "loom_gen": ["exact_match"]}


def latest(pattern):
    files = sorted(glob.glob(pattern, recursive=True), key=os.path.getmtime)
    if not files:
        sys.exit(f"compare.py: nothing matches {pattern}")
    return files[-1]


def load(out, side):
    results_path = latest(f"{out}/{side}/**/results_*.json")
    with open(results_path) as f:
        results = json.load(f)
    samples = {}
    for task in METRICS:
        with open(latest(f"{out}/{side}/**/samples_{task}_*.jsonl")) as f:
            samples[task] = {s["doc_id"]: s for s in map(json.loads, f)}
    return results_path, results, samples


def metric(results, task, name, filt):
    r = results["results"][task]
    return r[f"{name},{filt}"], r[f"{name}_stderr,{filt}"]


def loglik_gap(a, b):
    """Largest and mean |log-likelihood difference| over every choice, and the
    mean signed difference (a bias, e.g. a continuation token scored wrongly,
    shows there; rounding noise averages out)."""
    diffs = []
    for doc_id, sa in a.items():
        for ra, rb in zip(sa["resps"], b[doc_id]["resps"]):
            diffs.append(float(ra[0][0]) - float(rb[0][0]))
    gaps = [abs(d) for d in diffs]
    return max(gaps), sum(gaps) / len(gaps), sum(diffs) / len(diffs), len(gaps)


def main():
    out, dest = sys.argv[1], sys.argv[2]
    runs = {side: load(out, side) for side in SIDES}
    os.makedirs(dest, exist_ok=True)
    root = os.getcwd() + os.sep  # run_lm_eval.sh runs from the repository root
    for side, (path, _, _) in runs.items():
        with open(path) as f:
            text = f.read().replace(root, "")
        with open(os.path.join(dest, f"{side}.json"), "w") as f:
            f.write(text)

    rows, ok = [], True
    print(f"{'task':9} {'metric':12} {'loom':>15} {'hf':>15} {'diff':>7} {'2σ':>6} {'n':>4} "
          f"{'differ':>6}")
    for task, names in METRICS.items():
        filt = "strip" if task == "loom_gen" else "none"
        a, b = runs["loom"][2][task], runs["hf"][2][task]
        assert a.keys() == b.keys(), f"{task}: the runs scored different examples"
        for name in names:
            va, sa = metric(runs["loom"][1], task, name, filt)
            vb, sb = metric(runs["hf"][1], task, name, filt)
            bound = 2 * math.hypot(sa, sb)
            differ = sorted(d for d in a if a[d][name] != b[d][name])
            ok &= abs(va - vb) <= bound
            rows.append({"task": task, "metric": name, "n": len(a), "loom": va, "loom_stderr": sa,
                         "hf": vb, "hf_stderr": sb, "diff": va - vb, "two_sigma": bound,
                         "examples_scored_differently": differ})
            print(f"{task:9} {name:12} {va:.4f}±{sa:.4f} {vb:.4f}±{sb:.4f} {va - vb:+.4f} "
                  f"{bound:.4f} {len(a):4d} {len(differ):6d}")
    summary = {"rows": rows}
    mx, mean, bias, count = loglik_gap(runs["loom"][2]["loom_mc"], runs["hf"][2]["loom_mc"])
    summary["loom_mc_loglikelihood_gap"] = {"max": mx, "mean": mean, "mean_signed": bias,
                                            "choices": count}
    print(f"loom_mc log-likelihood |loom - hf| over {count} choices: max {mx:.4f}, mean {mean:.4f}; "
          f"mean loom - hf {bias:+.4f}")
    gen_a, gen_b = runs["loom"][2]["loom_gen"], runs["hf"][2]["loom_gen"]
    texts = [{"doc_id": d, "loom": gen_a[d]["resps"][0][0], "hf": gen_b[d]["resps"][0][0]}
             for d in sorted(gen_a) if gen_a[d]["resps"][0][0] != gen_b[d]["resps"][0][0]]
    summary["loom_gen_different_generations"] = texts
    print(f"loom_gen generations that differ: {len(texts)} of {len(gen_a)}")
    for t in texts[:10]:
        print(f"  doc {t['doc_id']}: loom {t['loom']!r} hf {t['hf']!r}")
    summary["agree_within_noise"] = ok
    with open(os.path.join(dest, "comparison.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print("scores agree within sampling noise" if ok else "scores DIFFER beyond sampling noise")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
