"""Structured output and tool calling through the official openai client
against `loom serve` on the real default model: Pydantic parse, every schema
of tests/structured/schemas.py at temperature 0 and 1 (>= 200 objects, all
valid), json_object / regex / choice, tools auto / required / named (streamed
and not), a two-turn tool conversation, and hostile schemas (clear 400 within
the compile bound, server healthy, KV back to 0)."""
import json
import re
import sys
import time
from pathlib import Path

import jsonschema
import pytest
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "structured"))
from schemas import CHOICES, REGEXES, SCHEMAS  # noqa: E402
from conftest import MODEL_NAME, Server  # noqa: E402

CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER


# A server of its own: a compile bound that a shared, loaded 2-core CI machine
# meets (length-bounded strings take a few hundred ms to compile on an idle
# core; the default bound is 2 s).
@pytest.fixture(scope="module")
def server():
    s = Server("--max-grammar-compile-ms", "30000")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600)

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "maxLength": 40},
                                  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Current local time in an IANA time zone",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 40}},
                   "required": ["tz"], "additionalProperties": False}}}
TOOLS = [WEATHER, TIME]
ASK = [{"role": "user", "content": "What's the weather like in Paris right now, in celsius?"}]


def chat(client, **kw):
    kw.setdefault("model", MODEL_NAME)
    kw.setdefault("max_tokens", 300)
    return client.chat.completions.create(**kw)


def check_call(call, tools=TOOLS):
    assert call.type == "function" and call.id.startswith("call_")
    schema = {t["function"]["name"]: t["function"]["parameters"] for t in tools}[call.function.name]
    jsonschema.validate(json.loads(call.function.arguments), schema)


def test_pydantic_parse(client):
    pydantic = pytest.importorskip("pydantic")

    class City(pydantic.BaseModel):
        name: str
        country: str
        population: int

    r = client.beta.chat.completions.parse(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Describe Paris as JSON."}],
        response_format=City, max_tokens=200, temperature=0)
    city = r.choices[0].message.parsed
    assert isinstance(city, City) and city.name


@pytest.mark.parametrize("temperature,n", [(0.0, 1), (1.0, 8)])
def test_every_schema_validates(client, temperature, n):
    objects = 0
    for name, schema in SCHEMAS.items():
        r = chat(client, messages=[{"role": "user", "content": f"Generate an example '{name}' JSON value."}],
                 response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema}},
                 temperature=temperature, n=n, seed=11, max_tokens=400)
        for c in r.choices:
            assert c.finish_reason == "stop", (name, c.message.content)
            jsonschema.Draft202012Validator(schema, format_checker=CHECKER).validate(json.loads(c.message.content))
            objects += 1
    assert len(SCHEMAS) >= 25 and objects == len(SCHEMAS) * n


def test_json_object_regex_choice(client, server):
    for temperature in (0.0, 1.0):
        r = chat(client, messages=[{"role": "user", "content": "Any JSON please."}],
                 response_format={"type": "json_object"}, temperature=temperature, n=4, seed=3)
        for c in r.choices:
            assert isinstance(json.loads(c.message.content), dict)
        for name, rx in REGEXES.items():
            r = chat(client, messages=[{"role": "user", "content": "Say something."}], temperature=temperature,
                     extra_body={"guided_regex": rx}, n=2)
            for c in r.choices:
                assert re.fullmatch(rx, c.message.content), (name, c.message.content)
        for name, choices in CHOICES.items():
            r = chat(client, messages=[{"role": "user", "content": "Pick one."}], temperature=temperature,
                     extra_body={"guided_choice": choices}, n=2)
            for c in r.choices:
                assert c.message.content in choices
    # /v1/completions takes response_format and structured_outputs too.
    r = client.completions.create(model=MODEL_NAME, prompt="A JSON object describing a dog:", max_tokens=200,
                                  extra_body={"response_format": {"type": "json_object"}})
    assert isinstance(json.loads(r.choices[0].text), dict)
    r = client.completions.create(model=MODEL_NAME, prompt="The answer is", max_tokens=10,
                                  extra_body={"structured_outputs": {"choice": ["yes", "no"]}})
    assert r.choices[0].text in ("yes", "no")


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_time"}}])
def test_forced_tool_calls(client, choice):
    r = chat(client, messages=ASK, tools=TOOLS, tool_choice=choice, temperature=1.0, n=3)
    for c in r.choices:
        assert c.finish_reason == "tool_calls"
        assert c.message.tool_calls and not (c.message.content or "").strip()
        for call in c.message.tool_calls:
            check_call(call)
            if isinstance(choice, dict):
                assert call.function.name == "get_time"


def collect_stream(stream):
    calls, content, finish = {}, "", None
    for chunk in stream:
        for ch in chunk.choices:
            d = ch.delta
            content += d.content or ""
            for tc in d.tool_calls or []:
                if tc.index not in calls:
                    # OpenAI's shape: index, id, type and name first.
                    assert tc.id and tc.function.name and tc.type == "function"
                    calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": ""}
                else:
                    assert tc.id is None and tc.function.name is None
                calls[tc.index]["arguments"] += tc.function.arguments or ""
            finish = ch.finish_reason or finish
    return calls, content, finish


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_forced_tool_calls_streamed(client, choice):
    calls, content, finish = collect_stream(chat(client, messages=ASK, tools=TOOLS, tool_choice=choice,
                                                 stream=True, temperature=0))
    assert finish == "tool_calls" and calls and not content.strip()
    for c in calls.values():
        schema = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}[c["name"]]
        jsonschema.validate(json.loads(c["arguments"]), schema)


def test_auto_tool_choice(client):
    # The model decides; whatever it writes must come back well formed, and
    # streamed and non-streamed greedy runs agree.
    r = chat(client, messages=ASK, tools=TOOLS, temperature=0)
    m = r.choices[0].message
    calls, content, finish = collect_stream(chat(client, messages=ASK, tools=TOOLS, temperature=0, stream=True))
    if m.tool_calls:
        assert r.choices[0].finish_reason == "tool_calls" and finish == "tool_calls"
        for call in m.tool_calls:
            check_call(call)
        assert [c["name"] for c in calls.values()] == [c.function.name for c in m.tool_calls]
    else:
        assert m.content and content == m.content and not calls
    assert "<tool_call>" not in (m.content or "") and "<tool_call>" not in content


def test_two_turn_tool_conversation(client):
    first = chat(client, messages=ASK, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}},
                 temperature=0)
    call = first.choices[0].message.tool_calls[0]
    messages = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": call.function.name,
                                                             "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 18, "sky": "sunny"})},
    ]
    second = chat(client, messages=messages, tools=TOOLS, tool_choice="none", temperature=0, max_tokens=80)
    answer = second.choices[0].message
    assert answer.content and not answer.tool_calls
    assert "18" in answer.content or "sunny" in answer.content.lower()


def nest(depth):
    s = {"type": "integer"}
    for _ in range(depth):
        s = {"type": "object", "properties": {"a": s}, "required": ["a"], "additionalProperties": False}
    return s


HOSTILE = [
    ("deep", {"type": "json_schema", "json_schema": {"name": "x", "schema": nest(60)}}),
    ("huge", {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {
        f"p{i}": {"type": "string", "pattern": "^[a-z]{3,9}@[a-z]{2,8}\\.com$"} for i in range(3000)}}}}),
    ("not", {"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {"type": "string"}}}}),
    ("unsatisfiable", {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "integer", "minimum": 3, "maximum": 1}}}),
    ("remote_ref", {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "http://x/y"}}}),
    ("recursive_required", {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"], "additionalProperties": False}}}),
    ("huge_enum", {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "enum": [f"v{i}" for i in range(5000)]}}}),
    ("long_string", {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "string", "maxLength": 100000}}}),
    ("pattern_repetition", {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "string", "pattern": "^(a|b){1,5000}$"}}}),
    ("bad_type", {"type": "yaml"}),
]


def test_hostile_requests_are_clear_400s(server):
    url = server.url + "/v1/chat/completions"
    for name, rf in HOSTILE:
        start = time.monotonic()
        r = requests.post(url, json={"messages": ASK, "response_format": rf, "max_tokens": 5}, timeout=60)
        assert r.status_code == 400, (name, r.text)
        err = r.json()["error"]
        # Too deep for the body's nesting limit is refused before the schema is looked at.
        assert (err["param"] or "").startswith("response_format") or "nest" in err["message"], (name, err)
        assert time.monotonic() - start < 3.0, name
    for body in ({"messages": ASK, "extra": 1, "guided_regex": "(a"},
                 {"messages": ASK, "guided_regex": "[a-z]{1,20000}"},
                 {"messages": ASK, "tools": TOOLS, "tool_choice": "bogus"},
                 {"messages": ASK, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}):
        r = requests.post(url, json=body, timeout=60)
        assert r.status_code == 400, r.text
    assert requests.get(server.url + "/health", timeout=10).status_code == 200
    deadline = time.time() + 10
    while server.metrics().get("loom_kv_cache_used_blocks", 0) != 0 and time.time() < deadline:
        time.sleep(0.2)
    assert server.metrics()["loom_kv_cache_used_blocks"] == 0


@pytest.mark.parametrize("fmt", ["llama3_json", "mistral", "pythonic", "gemma_tool_code"])
def test_tool_call_parser_override(fmt):
    """--tool-call-parser makes the model write forced calls in another format
    (its grammar: JSON objects, or Python-style keyword calls) and the parser
    read them back, streamed and not."""
    openai = pytest.importorskip("openai")
    s = Server("--tool-call-parser", fmt, "--max-grammar-compile-ms", "30000")
    try:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=600)
        r = chat(client, messages=ASK, tools=TOOLS, tool_choice="required", temperature=0)
        c = r.choices[0]
        assert c.finish_reason == "tool_calls" and c.message.tool_calls, c
        assert not (c.message.content or "").strip(), c.message.content
        for call in c.message.tool_calls:
            check_call(call)
        calls, content, finish = collect_stream(chat(
            client, messages=ASK, tools=TOOLS, stream=True, temperature=0,
            tool_choice={"type": "function", "function": {"name": "get_weather"}}))
        assert finish == "tool_calls" and [c["name"] for c in calls.values()] == ["get_weather"]
        assert not content.strip(), content
        jsonschema.validate(json.loads(calls[0]["arguments"]), WEATHER["function"]["parameters"])
    finally:
        s.stop()
