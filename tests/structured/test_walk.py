"""Random walks over the tokens a constraint allows (grammar_walk, on the real
default model's vocabulary) must all validate: every JSON schema walk with
jsonschema (formats checked), json_object walks parse as objects, regex and
choice walks match exactly. Hostile specs must fail with a clear error within
the compile bound. Needs LOOM_GRAMMAR_WALK (ctest sets it) and the model."""
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import jsonschema
import pytest

from schemas import CHOICES, GRAMMARS, REGEXES, SCHEMAS

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "qwen2.5-coder-0.5b-instruct.gguf"
WALK = os.environ.get("LOOM_GRAMMAR_WALK", str(ROOT / "build" / "cpu" / "tests" / "grammar_walk"))
SAMPLES = int(os.environ.get("LOOM_WALK_SAMPLES", "12"))

pytestmark = pytest.mark.skipif(not MODEL.exists() or not Path(WALK).exists(),
                                reason="needs the default model and grammar_walk")


def run_walk(cases, samples, *extra):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for c in cases:
            f.write(json.dumps(c) + "\n")
        path = f.name
    try:
        out = subprocess.run([WALK, "--model", str(MODEL), "--cases", path, "--samples", str(samples),
                              *extra], capture_output=True, text=True, timeout=1500, check=True)
    finally:
        os.unlink(path)
    lines = [json.loads(l) for l in out.stdout.splitlines() if l.strip()]
    errors = {l["name"]: l["error"] for l in lines if "error" in l}
    walks = [l for l in lines if "sample" in l]
    return errors, walks


@pytest.fixture(scope="module")
def walks():
    cases = [{"name": f"schema:{k}", "kind": "json_schema", "spec": v} for k, v in SCHEMAS.items()]
    cases += [{"name": f"regex:{k}", "kind": "regex", "spec": v} for k, v in REGEXES.items()]
    cases += [{"name": f"choice:{k}", "kind": "choice", "spec": v} for k, v in CHOICES.items()]
    cases += [{"name": f"grammar:{k}", "kind": "grammar", "spec": v} for k, v in GRAMMARS.items()]
    cases += [{"name": "json_object", "kind": "json_object"}]
    # An optional group whose body loops (an xgrammar FSM bug, patched).
    cases += [{"name": "schema:fsm_optional_loop", "kind": "json_schema", "spec": FSM_OPTIONAL_LOOP}]
    errors, ws = run_walk(cases, SAMPLES, "--seed", "7")
    assert not errors, errors
    return ws


FSM_OPTIONAL_LOOP = {"type": "string", "pattern": "^a(xy+)?b(\\.[0-9]+)?$"}
SCHEMAS_AND_EXTRA = dict(SCHEMAS, fsm_optional_loop=FSM_OPTIONAL_LOOP)


def by_prefix(walks, prefix):
    out = [w for w in walks if w["name"].startswith(prefix)]
    assert out
    return out


def test_every_walk_terminates(walks):
    bad = [w for w in walks if not w["terminated"] or w["rejected_allowed_token"]]
    assert not bad, bad[:3]


def test_json_schema_walks_validate(walks):
    assert len(SCHEMAS) >= 20
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    for fmt in ("email", "ipv4", "uuid", "date", "date-time", "time", "ipv6", "json-pointer"):
        assert fmt in checker.checkers, f"jsonschema cannot check format {fmt}"
    count = 0
    for w in by_prefix(walks, "schema:"):
        schema = SCHEMAS_AND_EXTRA[w["name"].split(":", 1)[1]]
        value = json.loads(w["text"])
        jsonschema.Draft202012Validator(schema, format_checker=checker).validate(value)
        count += 1
    assert count >= 20 * SAMPLES


def test_json_object_walks_parse(walks):
    for w in by_prefix(walks, "json_object"):
        assert isinstance(json.loads(w["text"]), dict), w["text"]


def test_regex_and_choice_walks_match(walks):
    for w in by_prefix(walks, "regex:"):
        assert re.fullmatch(REGEXES[w["name"].split(":", 1)[1]], w["text"]), w
    for w in by_prefix(walks, "choice:"):
        assert w["text"] in CHOICES[w["name"].split(":", 1)[1]], w
    for w in by_prefix(walks, "grammar:"):
        assert re.fullmatch(r"(\(|\)|\+|[0-9])+", w["text"]), w


def nest(depth):
    s = {"type": "integer"}
    for _ in range(depth):
        s = {"type": "object", "properties": {"a": s}, "required": ["a"], "additionalProperties": False}
    return s


HOSTILE = {
    "deep": ({"kind": "json_schema", "spec": nest(200)}, "nests deeper"),
    "huge": ({"kind": "json_schema", "spec": {"type": "object", "properties": {
        f"p{i}": {"type": "string", "pattern": "^[a-z]{3,9}@[a-z]{2,8}\\.com$"} for i in range(3000)}}},
        "bytes"),
    "unsatisfiable_range": ({"kind": "json_schema", "spec": {"type": "integer", "minimum": 5, "maximum": 1}},
                            "range"),
    "unsatisfiable_false": ({"kind": "json_schema", "spec": {"type": "object", "properties": {"a": False},
                                                             "required": ["a"]}}, "matches no value"),
    "unsupported_not": ({"kind": "json_schema", "spec": {"not": {"type": "string"}}}, "'not'"),
    "unsupported_format": ({"kind": "json_schema", "spec": {"type": "string", "format": "credit-card"}},
                           "credit-card"),
    "unsupported_allof": ({"kind": "json_schema", "spec": {"allOf": [{"type": "object"}, {"required": []}]}},
                          "allOf"),
    "overlapping_oneof": ({"kind": "json_schema", "spec": {"oneOf": [{"type": "integer"}, {"type": "number"}]}},
                          "oneOf"),
    "remote_ref": ({"kind": "json_schema", "spec": {"$ref": "https://example.com/s.json"}}, "$ref"),
    "dangling_ref": ({"kind": "json_schema", "spec": {"$ref": "#/$defs/missing"}}, "resolve"),
    "backreference": ({"kind": "regex", "spec": "(a)\\1"}, ""),
    "bad_grammar": ({"kind": "grammar", "spec": "root ::= undefined_rule"}, ""),
}


def test_hostile_specs_fail_clearly_within_the_bound():
    cases = [dict(c, name=k) for k, (c, _) in HOSTILE.items()]
    cases.append({"name": "recursive_required", "kind": "json_schema", "spec": {
        "type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"], "additionalProperties": False}})
    cases.append({"name": "pathological_regex", "kind": "regex", "spec": "((a|aa|aaa)*)*(b|ab|aab){1,50}c"})
    import time
    start = time.monotonic()
    errors, walks = run_walk(cases, 1, "--compile-ms", "2000", "--max-tokens", "300")
    elapsed = time.monotonic() - start
    for name, (_, needle) in HOSTILE.items():
        assert name in errors, (name, [w for w in walks if w["name"] == name][:1])
        assert needle in errors[name], (name, errors[name])
    # Either refused, or (if accepted) every walk it allows must be finite and stop.
    for name in ("recursive_required", "pathological_regex"):
        if name not in errors:
            for w in walks:
                if w["name"] == name:
                    assert w["terminated"] or w["tokens"] >= 300, w
    assert elapsed < 60, elapsed
