"""POST /v1/responses through the openai client's responses.create: string
and item input, instructions, max_output_tokens, usage, streaming events,
and the stateless refusals (function tools: test_responses_tools.py)."""
import json

import pytest
import requests

from conftest import MODEL_NAME


def test_string_input(client):
    r = client.responses.create(model=MODEL_NAME, input="Count from 1 to 5.", instructions="You are terse.",
                                max_output_tokens=40, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_") and r.model == MODEL_NAME
    assert r.status in ("completed", "incomplete") and r.output_text
    assert r.output[0].type == "message" and r.output[0].role == "assistant"
    assert r.usage.input_tokens > 5 and 0 < r.usage.output_tokens <= 40
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.instructions == "You are terse." and r.store is False
    chat = client.chat.completions.create(model=MODEL_NAME, max_tokens=40, temperature=0, messages=[
        {"role": "system", "content": "You are terse."}, {"role": "user", "content": "Count from 1 to 5."}])
    assert r.output_text == chat.choices[0].message.content
    assert r.usage.input_tokens == chat.usage.prompt_tokens


def test_item_input_and_incomplete(client):
    r = client.responses.create(model=MODEL_NAME, max_output_tokens=3, temperature=0, input=[
        {"role": "developer", "content": "You are terse."},
        {"role": "user", "content": [{"type": "input_text", "text": "Say hello."}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Hello."}]},
        {"type": "message", "role": "user", "content": "Count to ten."}])
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3


def test_streaming(client):
    kwargs = dict(model=MODEL_NAME, input="Count from 1 to 5.", max_output_tokens=12, temperature=0)
    full = client.responses.create(**kwargs)
    events = list(client.responses.create(stream=True, **kwargs))
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done",
                          "response.completed" if full.status == "completed" else "response.incomplete"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == full.output_text == events[-1].response.output_text
    assert events[-1].response.usage.output_tokens == full.usage.output_tokens
    assert events[0].response.status == "in_progress"


def test_logprobs_match_chat(client):
    kwargs = dict(model=MODEL_NAME, input="Count from 1 to 5.", max_output_tokens=8, temperature=0)
    r = client.responses.create(top_logprobs=3, **kwargs)
    logprobs = r.output[0].content[0].logprobs
    assert len(logprobs) == r.usage.output_tokens and r.top_logprobs == 3
    chat = client.chat.completions.create(model=MODEL_NAME, max_tokens=8, temperature=0, logprobs=True,
                                          top_logprobs=3, messages=[{"role": "user", "content": "Count from 1 to 5."}])
    want = chat.choices[0].logprobs.content
    assert [t.token for t in logprobs] == [t.token for t in want]
    for got, ref in zip(logprobs, want):
        assert got.logprob == pytest.approx(ref.logprob, abs=1e-4)
        assert [a.token for a in got.top_logprobs] == [a.token for a in ref.top_logprobs]
    plain = client.responses.create(include=["message.output_text.logprobs"], **kwargs)
    assert [t.token for t in plain.output[0].content[0].logprobs] == [t.token for t in want]
    assert all(t.top_logprobs == [] for t in plain.output[0].content[0].logprobs)
    none = client.responses.create(**kwargs)
    assert none.output[0].content[0].logprobs == []
    events = list(client.responses.create(stream=True, top_logprobs=2, **kwargs))
    streamed = [t for e in events if e.type == "response.output_text.delta" for t in e.logprobs]
    assert [t.token for t in streamed] == [t.token for t in want]
    done = next(e for e in events if e.type == "response.output_text.done")
    assert [t.token for t in done.logprobs] == [t.token for t in want]


@pytest.mark.parametrize("body,param", [
    ({"input": "hi", "top_logprobs": 99}, "top_logprobs"),
    ({"input": "hi", "include": ["reasoning.encrypted_content"]}, "include"),
    ({"input": "hi", "include": "message.output_text.logprobs"}, "include"),
    ({"input": "hi", "background": True}, "background"),
    ({"input": "hi", "conversation": "conv_1"}, "conversation"),
    ({"input": "hi", "prompt": {"id": "pmpt_1"}}, "prompt"),
    ({"input": "hi", "tool_choice": "required"}, "tool_choice"),
    ({"input": "hi", "service_tier": "bogus"}, "service_tier"),
    ({"input": "hi", "previous_response_id": "resp_123"}, "previous_response_id"),
    ({"input": "hi", "store": True}, "store"),
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools"),
    ({"input": "hi", "tools": [{"type": "function", "name": "f", "strict": True}]}, "tools"),
    ({"input": "hi", "tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "file_search"}},
     "tool_choice"),
    ({"input": [{"type": "function_call_output", "call_id": "x", "output": "1"}]}, "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input"),
    ({"input": 5}, "input"),
    ({}, "input"),
    ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "hi", "text": {"format": {"type": "yaml"}}}, "text"),
    ({"input": "hi", "reasoning": {"effort": "extreme"}}, "reasoning"),
])
def test_refusals_name_the_field(server, body, param):
    r = requests.post(server.url + "/v1/responses", json={"model": MODEL_NAME, **body}, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"], err


def test_previous_response_id_message(client):
    openai = pytest.importorskip("openai")
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL_NAME, input="hi", previous_response_id="resp_1")
    assert "stateless" in str(e.value)


def test_raw_stream_framing(server):
    r = requests.post(server.url + "/v1/responses", json={"model": MODEL_NAME, "input": "hi", "stream": True,
                                                          "max_output_tokens": 3}, timeout=120)
    blocks = r.text.strip().split("\n\n")
    for b in blocks:
        event, data = b.split("\n")
        assert event.startswith("event: ") and data.startswith("data: ")
        assert json.loads(data[6:])["type"] == event[7:]
    assert "[DONE]" not in r.text
