"""POST /v1/responses through the openai client's responses.create: string
and item input, instructions, max_output_tokens, usage, streaming events,
and the stateless refusals."""
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


@pytest.mark.parametrize("body,param", [
    ({"input": "hi", "previous_response_id": "resp_123"}, "previous_response_id"),
    ({"input": "hi", "store": True}, "store"),
    ({"input": "hi", "tools": [{"type": "function", "name": "f"}]}, "tools"),
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
