"""Tool use on POST /v1/messages through the official `anthropic` client:
tools and tool_choice (forced calls are grammar-constrained, so deterministic),
tool_use blocks in the reply (streamed as input_json_delta events), and a
conversation that sends the tool's result back."""
import json

import pytest
import requests

from conftest import MODEL_NAME

jsonschema = pytest.importorskip("jsonschema")

WEATHER = {
    "name": "get_weather",
    "description": "Current weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"],
    },
}
TIME = {"name": "get_time", "description": "Current time in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
ASK = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def claude(server):
    anthropic = pytest.importorskip("anthropic")
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=300)


def tool_uses(message):
    return [b for b in message.content if b.type == "tool_use"]


@pytest.mark.parametrize("choice, name", [({"type": "any"}, None), ({"type": "tool", "name": "get_time"}, "get_time")])
def test_forced_tool_use(claude, choice, name):
    m = claude.messages.create(model=MODEL_NAME, max_tokens=80, messages=ASK, tools=[WEATHER, TIME],
                               tool_choice=choice, extra_body=GREEDY)
    assert m.stop_reason == "tool_use", m
    calls = tool_uses(m)
    assert calls and all(c.id for c in calls)
    schemas = {t["name"]: t["input_schema"] for t in (WEATHER, TIME)}
    for c in calls:
        assert c.name == (name or c.name) and c.name in schemas
        jsonschema.validate(c.input, schemas[c.name])
    # Text (if any) comes before the tool_use blocks.
    kinds = [b.type for b in m.content]
    assert kinds == sorted(kinds, key=lambda k: k == "tool_use")


def test_streamed_tool_use_matches(claude):
    kwargs = dict(model=MODEL_NAME, max_tokens=80, messages=ASK, tools=[WEATHER],
                  tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
                  extra_body=GREEDY)
    full = claude.messages.create(**kwargs)
    with claude.messages.stream(**kwargs) as stream:
        streamed = stream.get_final_message()
    assert streamed.stop_reason == full.stop_reason == "tool_use"
    assert len(tool_uses(full)) == 1
    assert [(c.name, c.input) for c in tool_uses(streamed)] == [(c.name, c.input) for c in tool_uses(full)]
    jsonschema.validate(tool_uses(streamed)[0].input, WEATHER["input_schema"])


def test_stream_events(server):
    body = {"model": MODEL_NAME, "max_tokens": 80, "messages": ASK, "tools": [WEATHER], "stream": True,
            "tool_choice": {"type": "tool", "name": "get_weather"}, "temperature": 0}
    r = requests.post(server.url + "/v1/messages", json=body, stream=True, timeout=300)
    assert r.status_code == 200
    events = [json.loads(line[6:]) for line in r.iter_lines(decode_unicode=True) if line.startswith("data: ")]
    starts = [e for e in events if e["type"] == "content_block_start"]
    tool = [e for e in starts if e["content_block"]["type"] == "tool_use"]
    assert len(tool) == 1 and tool[0]["content_block"]["name"] == "get_weather"
    assert tool[0]["content_block"]["input"] == {} and tool[0]["content_block"]["id"]
    index = tool[0]["index"]
    assert index == len(starts) - 1 and [s["index"] for s in starts] == list(range(len(starts)))
    fragments = [e["delta"]["partial_json"] for e in events
                 if e["type"] == "content_block_delta" and e["index"] == index]
    assert len(fragments) > 1  # arguments arrive in pieces
    jsonschema.validate(json.loads("".join(fragments)), WEATHER["input_schema"])
    stops = [e["index"] for e in events if e["type"] == "content_block_stop"]
    assert stops == list(range(len(starts)))
    delta = next(e for e in events if e["type"] == "message_delta")
    assert delta["delta"]["stop_reason"] == "tool_use"


def test_tool_result_conversation(claude, client):
    first = claude.messages.create(model=MODEL_NAME, max_tokens=80, messages=ASK, tools=[WEATHER],
                                   tool_choice={"type": "tool", "name": "get_weather"}, extra_body=GREEDY)
    call = tool_uses(first)[0]
    result = "23 degrees celsius, sunny"
    turns = [*ASK, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                           "content": [{"type": "text", "text": result}]}]}]
    answer = claude.messages.create(model=MODEL_NAME, max_tokens=40, messages=turns, tools=[WEATHER],
                                    extra_body=GREEDY)
    assert answer.stop_reason in ("end_turn", "max_tokens", "tool_use")
    # The same conversation through chat completions (tool_calls, a role
    # "tool" message) gives the same reply: the translation is exact.
    text = "".join(b.text for b in answer.content if b.type == "text")
    chat = client.chat.completions.create(
        model=MODEL_NAME, max_tokens=40, temperature=0,
        tools=[{"type": "function", "function": {"name": WEATHER["name"], "description": WEATHER["description"],
                                                 "parameters": WEATHER["input_schema"]}}],
        messages=[*ASK, {"role": "assistant", "content": "".join(b.text for b in first.content if b.type == "text"),
                         "tool_calls": [{"id": call.id, "type": "function",
                                         "function": {"name": call.name, "arguments": json.dumps(call.input)}}]},
                  {"role": "tool", "tool_call_id": call.id, "content": result}])
    assert text == (chat.choices[0].message.content or "")
    assert answer.usage.input_tokens == chat.usage.prompt_tokens
    # tool_choice none: plain text, even with tools.
    none = claude.messages.create(model=MODEL_NAME, max_tokens=20, messages=turns, tools=[WEATHER],
                                  tool_choice={"type": "none"}, extra_body=GREEDY)
    assert not tool_uses(none) and none.stop_reason != "tool_use"
    # An error result is passed on, too.
    turns[-1]["content"][0]["is_error"] = True
    errored = claude.messages.create(model=MODEL_NAME, max_tokens=20, messages=turns, tools=[WEATHER],
                                     extra_body=GREEDY)
    assert errored.content
