"""Raw HTTP against the routes `loom serve` answers through the chat path
(/v1/messages, /v1/responses) and /tokenizer_info: wrong types at every level
of the body, oversized and nested fields, chat-path bounds reported under the
route's own field names. Each is a clear 4xx in the route's error shape, and
both routes still serve afterwards."""
import json

import pytest
import requests

from conftest import MODEL_NAME

MESSAGES_OK = {"model": MODEL_NAME, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
RESPONSES_OK = {"model": MODEL_NAME, "input": "hi", "max_output_tokens": 4}
LONG = "word " * 5000  # past the test server's context
# Names of the chat path's fields that must not leak into the routes' errors.
CHAT_NAMES = ["max_completion_tokens", "response_format", "reasoning_effort", "user: 'user'"]


def post(server, path, body):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return requests.post(server.url + path, data=data, headers={"Content-Type": "application/json"},
                         timeout=120)


def user(content):
    return [{"role": "user", "content": content}]


MESSAGES_BAD = [
    ({"messages": [{"role": 5, "content": "a"}]}, "messages[0].role"),
    ({"messages": [{"role": ["user"], "content": "a"}]}, "messages[0].role"),
    ({"messages": [{"content": "a"}]}, "messages[0].role"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
    ({"messages": user(5)}, "messages[0].content"),
    ({"messages": user({"type": "text", "text": "a"})}, "messages[0].content"),
    ({"messages": user([5])}, "messages[0].content[0]"),
    ({"messages": user([{"type": 5, "text": "a"}])}, "messages[0].content[0]"),
    ({"messages": user([{"type": "text", "text": ["a"]}])}, "text must be a string"),
    ({"messages": user([{"type": "image", "source": {"type": "base64", "data": "x"}}])}, "image"),
    ({"messages": user([[[[["a"]]]]])}, "messages[0].content[0]"),
    ({"messages": []}, "messages"),
    ({"messages": {"role": "user", "content": "a"}}, "messages"),
    ({"messages": user("a") + [{"role": "assistant", "content": "b"}]}, "prefill"),
    ({"max_tokens": None}, "max_tokens"),
    ({"max_tokens": -1}, "max_tokens"),
    ({"max_tokens": 2 ** 63}, "max_tokens"),
    ({"system": {"text": "a"}}, "system"),
    ({"system": [{"type": "text", "text": 5}]}, "system"),
    ({"system": LONG}, "context"),
    ({"messages": user([{"type": "text", "text": "a"}] * 3000)}, "context"),
    ({"stop_sequences": "x"}, "stop_sequences"),
    ({"stop_sequences": [None]}, "stop_sequences"),
    ({"stop_sequences": ["s" * 5000]}, "stop_sequences"),
    ({"thinking": {"type": 5}}, "thinking.type"),
    ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking"),
    ({"thinking": "on"}, "thinking"),
    ({"tools": "f"}, "tools"),
    ({"tools": [{"name": "f"}]}, "input_schema"),
    ({"tools": [{"name": "f", "input_schema": {"type": "object"}}] * 2}, "f"),
    ({"tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": "any"}, "tool_choice"),
    ({"tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "x" * 100000}},
     "tool_choice.type"),
    ({"tool_choice": {"type": "tool", "name": "f"}}, "tool_choice"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": [1]}]},
                   {"role": "user", "content": "a"}]}, "input"),
    ({"messages": user([{"type": "tool_result", "tool_use_id": "t", "content": "r"}])}, "tool_use_id"),
    ({"metadata": {"user_id": "u" * 100000}}, "metadata.user_id"),
    ({"metadata": [1]}, "metadata"),
    ({"temperature": -0.5}, "temperature"),
    ({"top_p": [1]}, "top_p"),
    ({"top_k": "40"}, "top_k"),
    ({"model": 5}, "model"),
    ({"stream": True, "max_tokens": 0}, "max_tokens"),
]


@pytest.mark.parametrize("fields,needle", MESSAGES_BAD)
def test_messages_rejects(server, fields, needle):
    r = post(server, "/v1/messages", {**MESSAGES_OK, **fields})
    assert r.status_code == 400, (fields, r.text[:300])
    assert r.headers["Content-Type"].startswith("application/json")  # no stream opened
    body = r.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == "invalid_request_error"
    message = body["error"]["message"]
    assert needle in message, message
    assert not any(name in message for name in CHAT_NAMES), message


RESPONSES_BAD = [
    ({"input": [{"type": 5, "role": "user", "content": "a"}]}, "input", "input[0].type"),
    ({"input": [{"role": 5, "content": "a"}]}, "input", "input[0].role"),
    ({"input": [{"role": "tool", "content": "a"}]}, "input", "input[0].role"),
    ({"input": [{"role": "user", "content": [{"type": 5, "text": "a"}]}]}, "input",
     "input[0].content[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_text", "text": 5}]}]}, "input",
     "text must be a string"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input",
     "input_image"),
    ({"input": [{"role": "user", "content": [[[["a"]]]]}]}, "input", "input[0].content[0]"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c"}]}, "input",
     "function_call"),
    ({"input": []}, "input", "input"),
    ({"input": None}, "input", "input"),
    ({"input": 5}, "input", "input"),
    ({"input": LONG}, "input", "context"),
    ({"instructions": LONG}, "input", "context"),
    ({"instructions": ["a"]}, "instructions", "instructions"),
    ({"text": {"format": {"type": 5}}}, "text", "text.format.type"),
    ({"text": {"format": {"type": "xml"}}}, "text", "text.format.type"),
    ({"text": {"format": "json"}}, "text", "text.format.type"),
    ({"text": {"format": {"type": "json_schema", "name": "s", "schema": 5}}}, "text.format.schema",
     "'text.format.schema'"),
    ({"reasoning": {"effort": "max"}}, "reasoning", "'reasoning'"),
    ({"reasoning": {"effort": 5}}, "reasoning", "reasoning"),
    ({"max_output_tokens": 0}, "max_output_tokens", "'max_output_tokens'"),
    ({"max_output_tokens": 10 ** 9, "stream": True}, "max_output_tokens", "'max_output_tokens'"),
    ({"max_output_tokens": 1.5}, "max_output_tokens", "max_output_tokens"),
    ({"temperature": "0"}, "temperature", "temperature"),
    ({"tools": [{"type": "code_interpreter"}]}, "tools", "code_interpreter"),
    ({"tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}] * 2}, "tools[1].name", "f"),
    ({"input": [{"type": "function_call_output", "call_id": "c" * 100000, "output": "1"}]}, "input", "call_id"),
    ({"previous_response_id": 5}, "previous_response_id", "stateless"),
    ({"model": 5}, "model", "model"),
]


@pytest.mark.parametrize("fields,param,needle", RESPONSES_BAD)
def test_responses_rejects(server, fields, param, needle):
    r = post(server, "/v1/responses", {**RESPONSES_OK, **fields})
    assert r.status_code == 400, (fields, r.text[:300])
    assert r.headers["Content-Type"].startswith("application/json")
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error" and err["param"] == param, err
    assert needle in err["message"], err
    assert not any(name in err["message"] for name in CHAT_NAMES), err


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/responses"])
def test_adapted_routes_huge_bodies(server, path):
    ok = MESSAGES_OK if path == "/v1/messages" else RESPONSES_OK
    # Within the body limit but wide: many keys, a long unknown field, deep
    # nesting in an ignored field (the JSON depth bound still applies).
    wide = {**ok, **{f"k{i}": i for i in range(20000)}}
    assert post(server, path, wide).status_code == 200
    deep = json.dumps(ok)[:-1] + ', "extra": ' + "[" * 5000 + "]" * 5000 + "}"
    assert post(server, path, deep).status_code == 400
    assert post(server, path, json.dumps(ok)[:-1] + ', "x": "' + "a" * (6 << 20) + '"}').status_code == 413
    assert post(server, path, b'{"model": "' + b"\xc3" * 1000 + b'"}').status_code == 400


def test_tokenizer_info(server):
    r = requests.get(server.url + "/tokenizer_info")
    assert r.status_code == 200, r.text
    info = r.json()
    assert info["model_max_length"] > 0 and info["chat_template"]
    assert isinstance(info["add_bos_token"], bool)
    eos = requests.post(server.url + "/tokenize",
                        json={"prompt": info["eos_token"], "add_special_tokens": False}).json()
    assert eos["count"] == 1  # the special token, not its characters
    back = requests.post(server.url + "/detokenize", json={"tokens": eos["tokens"]})
    assert back.status_code == 200
    assert requests.post(server.url + "/tokenizer_info").status_code == 405


def test_adapted_routes_serve_afterwards(server):
    # Runs after the rejects above (pytest keeps file order).
    assert requests.get(server.url + "/health").status_code == 200
    m = post(server, "/v1/messages", MESSAGES_OK)
    assert m.status_code == 200 and m.json()["content"][0]["text"], m.text
    r = post(server, "/v1/responses", RESPONSES_OK)
    assert r.status_code == 200 and r.json()["output"][0]["content"][0]["text"], r.text
