"""Structured-output validity against a running `loom serve` whatever the
weights (the device stage `structured` serves a random-weight model on the
GPU): every schema of tests/structured/schemas.py, plus regexes and choices,
through /v1/completions at temperature 0 and 1. Prints one JSON line:
objects that stopped and validate, that stopped and do NOT validate (must be
0: a mask error), and that hit max_tokens (a random model may wander).
Usage: structured_check.py URL MODEL [N]"""
import json
import re
import sys
from pathlib import Path

import jsonschema
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "structured"))
from schemas import CHOICES, REGEXES, SCHEMAS  # noqa: E402

url, model = sys.argv[1], sys.argv[2]
n = int(sys.argv[3]) if len(sys.argv) > 3 else 8
checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
counts = {"valid": 0, "invalid": 0, "length": 0}
bad = []


def run(extra, check, name, temperature):
    r = requests.post(url + "/v1/completions", timeout=600, json={
        "model": model, "prompt": "Output:", "max_tokens": 1500, "n": n if temperature > 0 else 1,
        "temperature": temperature, "seed": 5, **extra})
    r.raise_for_status()
    for c in r.json()["choices"]:
        if c["finish_reason"] == "length":
            counts["length"] += 1
            continue
        try:
            check(c["text"])
            counts["valid"] += 1
        except Exception as e:  # noqa: BLE001
            counts["invalid"] += 1
            bad.append({"name": name, "text": c["text"][:300], "error": str(e)[:300]})


for t in (0.0, 1.0):
    for name, schema in SCHEMAS.items():
        run({"response_format": {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}},
            lambda text, s=schema: jsonschema.Draft202012Validator(s, format_checker=checker).validate(json.loads(text)),
            name, t)
    run({"response_format": {"type": "json_object"}},
        lambda text: isinstance(json.loads(text), dict) or (_ for _ in ()).throw(ValueError("not an object")),
        "json_object", t)
    for name, rx in REGEXES.items():
        run({"guided_regex": rx}, lambda text, rx=rx: re.fullmatch(rx, text) or (_ for _ in ()).throw(ValueError(text)),
            name, t)
    for name, ch in CHOICES.items():
        run({"guided_choice": ch}, lambda text, ch=ch: text in ch or (_ for _ in ()).throw(ValueError(text)), name, t)
print(json.dumps({"what": "structured output validity, random weights", **counts, "invalid_examples": bad[:5]}))
sys.exit(1 if counts["invalid"] else 0)
