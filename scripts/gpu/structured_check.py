"""Structured-output validity against a running `loom serve` whatever the
weights (the device stage `structured` serves a random-weight model on the
GPU): every schema of tests/structured/schemas.py, plus json_object, regexes
and choices, through /v1/completions at temperature 0 and 1, all requests in
flight at once. Prints one JSON line: outputs that stopped and validate, that
stopped and do NOT validate (must be 0: a mask error), and that hit
max_tokens (a random model may wander). Needs only the standard library and
jsonschema (the device stage unpacks it from the prebuilt tarball's wheels).
Usage: structured_check.py URL MODEL [N]"""
import json
import re
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "structured"))
from schemas import CHOICES, REGEXES, SCHEMAS  # noqa: E402

url, model = sys.argv[1], sys.argv[2]
n = int(sys.argv[3]) if len(sys.argv) > 3 else 8
checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
counts = {"valid": 0, "invalid": 0, "length": 0, "http_errors": 0}
bad = []


def post(body):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=900) as r:
        return json.loads(r.read())


def run(extra, check, name, temperature):
    body = {"model": model, "prompt": "Output:", "max_tokens": 1500, "n": n if temperature > 0 else 1,
            "temperature": temperature, "seed": 5, **extra}
    try:
        choices = post(body)["choices"]
    except Exception as e:  # noqa: BLE001
        return [("http_error", name, str(e)[:300])]
    out = []
    for c in choices:
        if c["finish_reason"] == "length":
            out.append(("length", name, ""))
            continue
        try:
            check(c["text"])
            out.append(("valid", name, ""))
        except Exception as e:  # noqa: BLE001
            out.append(("invalid", name, f"{c['text'][:300]!r}: {str(e)[:300]}"))
    return out


def must(ok, text):
    if not ok:
        raise ValueError(text)


jobs = []
for t in (0.0, 1.0):
    for name, schema in SCHEMAS.items():
        jobs.append(({"response_format": {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}},
                     lambda text, s=schema: jsonschema.Draft202012Validator(s, format_checker=checker).validate(
                         json.loads(text)), name, t))
    jobs.append(({"response_format": {"type": "json_object"}},
                 lambda text: must(isinstance(json.loads(text), dict), "not an object"), "json_object", t))
    for name, rx in REGEXES.items():
        jobs.append(({"guided_regex": rx}, lambda text, rx=rx: must(re.fullmatch(rx, text), "no match"), name, t))
    for name, ch in CHOICES.items():
        jobs.append(({"guided_choice": ch}, lambda text, ch=ch: must(text in ch, "not a choice"), name, t))

with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
    for results in pool.map(lambda j: run(*j), jobs):
        for kind, name, detail in results:
            counts["http_errors" if kind == "http_error" else kind] += 1
            if kind in ("invalid", "http_error"):
                bad.append({"name": name, "kind": kind, "detail": detail})
print(json.dumps({"what": "structured output validity, random weights", **counts, "invalid_examples": bad[:5]}))
sys.exit(1 if counts["invalid"] or counts["http_errors"] else 0)
