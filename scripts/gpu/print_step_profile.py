#!/usr/bin/env python3
"""Prints the step profiles (and server stages) found in benchmark JSON: the
lines of `loom bench offline --profile --json`, or the report of `loom bench
serve --profile` (one rate, or a sweep). Usage: print_step_profile.py FILE..."""
import json
import sys

COLUMNS = ["wall", "schedule", "prepare", "upload", "launch", "wait", "sample", "apply",
           "propose", "other", "device_span", "device_gap"]


def print_profile(title, report):
    p = report.get("step_profile")
    if p:
        print(f"\n## {title}: ms per step ({p['clock']}; steps' wall share of the run "
              f"{p['steps_wall_share']}, device span share {p['device_span_share']})")
        print("| kind | forward | steps | " + " | ".join(COLUMNS) + " |")
        print("|" + " --- |" * (len(COLUMNS) + 3))
        for r in p["rows"]:
            cells = [f"{r[c]['mean_ms']:.3f}" for c in COLUMNS]
            print(f"| {r['kind']} | {r['forward']} | {r['steps']} | " + " | ".join(cells) + " |")
        cb = p["callbacks"]
        print(f"delivery thread: {cb['batches']} batches, {cb['mean_ms']} ms each, {cb['total_ms']} ms in all")
    s = report.get("server_stages")
    if s:
        print(f"server stages ({title}), mean ms per request: " +
              ", ".join(f"{k} {v['mean_ms']}" for k, v in s.items()))


def main():
    for path in sys.argv[1:]:
        with open(path) as f:
            text = f.read()
        try:
            docs = [json.loads(text)]
        except json.JSONDecodeError:
            docs = [json.loads(l) for l in text.splitlines() if l.strip().startswith("{")]
        for d in docs:
            if "sweep" in d:
                for r in d["sweep"]:
                    print_profile(f"{path} rate {r.get('request_rate')}", r)
            else:
                print_profile(path, d)


if __name__ == "__main__":
    main()
