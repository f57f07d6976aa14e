"""Function tools on POST /v1/responses through the openai client:
tool_choice required / named (grammar-constrained, so deterministic),
function_call output items (streamed as function_call_arguments events), and
a conversation that sends the call's output back."""
import json

import pytest
import requests

from conftest import MODEL_NAME

jsonschema = pytest.importorskip("jsonschema")

WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city.",
           "parameters": {"type": "object", "required": ["city", "unit"],
                          "properties": {"city": {"type": "string"},
                                         "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}}
TIME = {"type": "function", "name": "get_time", "description": "Current time in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
ASK = "What is the weather in Paris, in celsius?"
SCHEMAS = {t["name"]: t["parameters"] for t in (WEATHER, TIME)}


def calls(response):
    return [o for o in response.output if o.type == "function_call"]


@pytest.mark.parametrize("choice, name", [("required", None), ({"type": "function", "name": "get_time"}, "get_time")])
def test_forced_function_call(client, choice, name):
    r = client.responses.create(model=MODEL_NAME, input=ASK, tools=[WEATHER, TIME], tool_choice=choice,
                                max_output_tokens=80, temperature=0)
    assert r.status == "completed" and calls(r)
    for c in calls(r):
        assert c.call_id and c.name == (name or c.name)
        jsonschema.validate(json.loads(c.arguments), SCHEMAS[c.name])
    assert r.tool_choice is not None and [t.name for t in r.tools] == ["get_weather", "get_time"]


def test_streamed_function_call_matches(client):
    kwargs = dict(model=MODEL_NAME, input=ASK, tools=[WEATHER], max_output_tokens=80, temperature=0,
                  tool_choice={"type": "function", "name": "get_weather"}, parallel_tool_calls=False)
    full = client.responses.create(**kwargs)
    events = list(client.responses.create(**kwargs, stream=True))
    types = [e.type for e in events]
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert len(deltas) > 1 and "".join(deltas) == done.arguments
    assert types.index("response.function_call_arguments.done") < types.index("response.completed")
    final = events[-1].response
    assert [(c.name, c.arguments) for c in calls(final)] == [(c.name, c.arguments) for c in calls(full)]
    assert len(calls(full)) == 1
    jsonschema.validate(json.loads(done.arguments), WEATHER["parameters"])


def test_function_call_output_conversation(client):
    first = client.responses.create(model=MODEL_NAME, input=ASK, tools=[WEATHER], max_output_tokens=80,
                                    temperature=0, tool_choice="required")
    call = calls(first)[0]
    result = "23 degrees celsius, sunny"
    answer = client.responses.create(
        model=MODEL_NAME, tools=[WEATHER], max_output_tokens=40, temperature=0,
        input=[{"role": "user", "content": ASK},
               {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
               {"type": "function_call_output", "call_id": call.call_id, "output": result}])
    chat = client.chat.completions.create(
        model=MODEL_NAME, max_tokens=40, temperature=0,
        tools=[{"type": "function", "function": {k: WEATHER[k] for k in ("name", "description", "parameters")}}],
        messages=[{"role": "user", "content": ASK},
                  {"role": "assistant", "content": "", "tool_calls": [
                      {"id": call.call_id, "type": "function",
                       "function": {"name": call.name, "arguments": call.arguments}}]},
                  {"role": "tool", "tool_call_id": call.call_id, "content": result}])
    assert answer.output_text == (chat.choices[0].message.content or "")
    assert answer.usage.input_tokens == chat.usage.prompt_tokens


@pytest.mark.parametrize("body", [
    {"input": [{"type": "function_call_output", "call_id": "nope", "output": "1"}]},
    {"input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]},
    {"input": "hi", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}},
    {"input": "hi", "tools": [WEATHER], "tool_choice": "sometimes"},
    {"input": "hi", "tools": [WEATHER], "parallel_tool_calls": "yes"},
])
def test_tool_refusals(server, body):
    r = requests.post(server.url + "/v1/responses", json={"model": MODEL_NAME, **body}, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"
