"""POST /v1/messages through the official `anthropic` client (and raw HTTP for
the exact event sequence): text, system, stop sequences, max_tokens, usage,
streaming, errors in Anthropic's format (tool use: test_anthropic_tools.py)."""
import json

import pytest
import requests

from conftest import MODEL_NAME

COUNT = [{"role": "user", "content": "Count from 1 to 10 separated by spaces."}]
GREEDY = {"temperature": 0}  # this client version has no sampling arguments; extra_body sends them


@pytest.fixture(scope="module")
def claude(server):
    anthropic = pytest.importorskip("anthropic")
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=300)


def test_message(claude, client):
    m = claude.messages.create(model=MODEL_NAME, max_tokens=12, system="You are terse.", messages=COUNT,
                               extra_body=GREEDY)
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
    assert m.model == MODEL_NAME
    assert len(m.content) == 1 and m.content[0].type == "text" and m.content[0].text
    assert m.stop_reason in ("end_turn", "max_tokens") and m.stop_sequence is None
    assert m.usage.input_tokens > 10 and 0 < m.usage.output_tokens <= 12
    # The same turn through chat completions gives the same text.
    chat = client.chat.completions.create(model=MODEL_NAME, max_tokens=12, temperature=0,
                                          messages=[{"role": "system", "content": "You are terse."}, *COUNT])
    assert m.content[0].text == chat.choices[0].message.content
    assert m.usage.input_tokens == chat.usage.prompt_tokens
    assert m.usage.output_tokens == chat.usage.completion_tokens


def test_text_blocks_and_system_blocks(claude):
    m = claude.messages.create(
        model=MODEL_NAME, max_tokens=4, extra_body=GREEDY,
        system=[{"type": "text", "text": "You are terse."}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "Say"}, {"type": "text", "text": "hi."}]},
                  {"role": "assistant", "content": "Hi."},
                  {"role": "user", "content": "Again."}])
    assert m.content[0].text


def test_stop_sequence_and_max_tokens(claude):
    m = claude.messages.create(model=MODEL_NAME, max_tokens=40, messages=COUNT, stop_sequences=["5"],
                               extra_body=GREEDY)
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == "5"
    assert "5" not in m.content[0].text and "4" in m.content[0].text
    short = claude.messages.create(model=MODEL_NAME, max_tokens=2, messages=COUNT, extra_body=GREEDY)
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 2


def test_streaming_matches(claude):
    kwargs = dict(model=MODEL_NAME, max_tokens=40, messages=COUNT, stop_sequences=["5"], extra_body=GREEDY)
    full = claude.messages.create(**kwargs)
    with claude.messages.stream(**kwargs) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == full.content[0].text == final.content[0].text
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == "5"
    assert final.usage.output_tokens == full.usage.output_tokens
    assert final.usage.input_tokens == full.usage.input_tokens


def sse_events(response):
    events = []
    for block in response.text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        data = json.loads(lines["data"])
        assert data["type"] == lines["event"]
        events.append(data)
    return events


def test_exact_event_sequence(server):
    r = requests.post(server.url + "/v1/messages", headers={"x-api-key": "unused", "anthropic-version": "2023-06-01"},
                      json={"model": MODEL_NAME, "max_tokens": 6, "messages": COUNT, "stream": True,
                            "temperature": 0}, timeout=120)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    events = sse_events(r)
    types = [e["type"] for e in events]
    assert types[:3] == ["message_start", "content_block_start", "ping"]
    assert types[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(types[3:-3]) == {"content_block_delta"}
    start = events[0]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["usage"]["input_tokens"] > 0
    assert events[1]["content_block"] == {"type": "text", "text": ""}
    deltas = [e["delta"] for e in events[3:-3]]
    assert all(d["type"] == "text_delta" for d in deltas)
    assert events[-2]["delta"]["stop_reason"] == "max_tokens"
    assert events[-2]["usage"]["output_tokens"] == 6


@pytest.mark.parametrize("body,needle", [
    ({"messages": COUNT}, "max_tokens"),
    ({"max_tokens": 4, "messages": []}, "messages"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "image"),
    ({"max_tokens": 4, "messages": COUNT, "tools": [{"name": "f"}]}, "input_schema"),
    ({"max_tokens": 4, "messages": COUNT, "tools": [{"type": "bash_20250124", "name": "bash"}]}, "bash_20250124"),
    ({"max_tokens": 4, "messages": COUNT, "tools": [{"name": "f", "input_schema": {}}],
      "tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
    ({"max_tokens": 4, "messages": COUNT, "tool_choice": {"type": "any"}}, "tool_choice needs tools"),
    ({"max_tokens": 4, "messages": COUNT, "tools": [{"name": "f", "input_schema": {}}],
      "tool_choice": {"type": "tool", "name": "g"}}, "g"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_x", "content": "1"}]}]}, "tool_use_id"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "tool_use", "id": "toolu_x", "name": "f", "input": {}}]}]}, "tool_use"),
    ({"max_tokens": 4, "messages": [*COUNT, {"role": "assistant", "content": "1 2"}]}, "prefill"),
    ({"max_tokens": 4, "messages": COUNT, "stop_sequences": "5"}, "stop_sequences"),
    ({"max_tokens": 4, "messages": COUNT, "stop_sequences": [""]}, "stop_sequences"),
    ({"max_tokens": 4, "messages": COUNT, "temperature": -1}, "temperature"),
    ({"max_tokens": 4, "messages": COUNT, "thinking": {"type": "enabled", "budget_tokens": 100}}, "thinking"),
])
def test_errors_in_anthropic_format(server, body, needle):
    r = requests.post(server.url + "/v1/messages", json={"model": MODEL_NAME, **body}, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert needle in err["error"]["message"], err


def test_client_raises_on_errors(claude, server):
    anthropic = pytest.importorskip("anthropic")
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(model=MODEL_NAME, max_tokens=10 ** 7, messages=COUNT)
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(model="claude-nope", max_tokens=4, messages=COUNT)
    r = requests.get(server.url + "/v1/messages")
    assert r.status_code == 405 and r.json()["type"] == "error"
