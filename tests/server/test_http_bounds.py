"""Raw HTTP against `loom serve`: every bound, malformed input, wrong types,
huge values, routes and methods. Every failure must be an OpenAI-style error
JSON naming the field, and the server must stay up."""
import json
import socket

import pytest
import requests

from conftest import MODEL_NAME


def post(server, path, body, **kw):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return requests.post(server.url + path, data=data, headers={"Content-Type": "application/json"},
                         timeout=60, **kw)


def check_error(r, status, param=None):
    assert r.status_code == status, r.text
    body = r.json()
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["message"]
    if param is not None:
        assert err["param"] == param, err
    return err


def test_health_ready(server):
    assert requests.get(server.url + "/health").json() == {"status": "ok"}
    r = requests.get(server.url + "/ready")
    assert r.status_code == 200 and r.json()["status"] == "ready"
    # The step limits as run: on the CPU (no flags given) the small defaults.
    assert "up to 256 sequences and 2048 tokens a step" in server.logs(), server.logs()[-2000:]


def test_routes_and_methods(server):
    check_error(requests.get(server.url + "/nope"), 404)
    check_error(requests.get(server.url + "/v1/completions"), 405)
    check_error(requests.post(server.url + "/v1/models"), 405)


@pytest.mark.parametrize("body", [b"", b"{", b"[1, 2]", b"\"x\"", b"{\"prompt\": }", b"nul",
                                  b"{\"prompt\": \"a\"} trailing"])
def test_malformed_json(server, body):
    check_error(post(server, "/v1/completions", body), 400)


def test_invalid_utf8(server):
    err = check_error(post(server, "/v1/completions", b'{"prompt": "a\xff\xfe"}'), 400)
    assert "UTF-8" in err["message"]
    check_error(post(server, "/v1/completions", b'{"prompt": "\\ud800"}'), 400)


@pytest.mark.parametrize("field,value", [
    ("max_tokens", "10"), ("max_tokens", 1.5), ("temperature", "hot"), ("top_p", True),
    ("top_k", 2.5), ("n", "2"), ("stop", 3), ("stop", [1]), ("seed", "s"), ("logit_bias", [1]),
    ("logprobs", True), ("echo", 1), ("ignore_eos", "no"), ("user", 5), ("priority", "hi"),
    ("stream", "true"), ("stream_options", 1), ("presence_penalty", "a"), ("min_p", "0"),
])
def test_wrong_types(server, field, value):
    check_error(post(server, "/v1/completions", {"prompt": "x", field: value}), 400, field)


@pytest.mark.parametrize("field,value", [
    ("max_tokens", 0), ("max_tokens", 10 ** 30), ("max_tokens", 2 ** 63), ("n", 10 ** 6),
    ("n", 0), ("temperature", 1e308), ("temperature", -1), ("top_p", 2), ("logprobs", 1000),
    ("presence_penalty", 1e9), ("frequency_penalty", -1e9), ("repetition_penalty", 0),
    ("priority", 10 ** 20), ("seed", 10 ** 40), ("min_tokens", 10 ** 9),
])
def test_huge_and_out_of_range(server, field, value):
    check_error(post(server, "/v1/completions", {"prompt": "x", field: value}), 400, field)


def test_chat_wrong_types(server):
    check_error(post(server, "/v1/chat/completions", {"messages": "hi"}), 400, "messages")
    check_error(post(server, "/v1/chat/completions", {"messages": [{"role": "x", "content": "a"}]}),
                400, "messages")
    check_error(post(server, "/v1/chat/completions",
                     {"messages": [{"role": "user", "content": "a"}], "logprobs": 3}), 400, "logprobs")
    check_error(post(server, "/v1/chat/completions",
                     {"messages": [{"role": "user", "content": "a"}], "top_logprobs": 3}), 400,
                "top_logprobs")


def test_body_size(server):
    big = json.dumps({"prompt": "a" * (5 << 20)})
    r = post(server, "/v1/completions", big)
    check_error(r, 413)


def test_json_depth(server):
    deep = '{"prompt": "x", "extra": ' + "[" * 100000 + "]" * 100000 + "}"
    err = check_error(post(server, "/v1/completions", deep), 400)
    assert "nesting" in err["message"]


def test_stop_bounds(server):
    check_error(post(server, "/v1/completions", {"prompt": "x", "stop": [str(i) for i in range(17)]}),
                400, "stop")
    check_error(post(server, "/v1/completions", {"prompt": "x", "stop": "s" * 1000}), 400, "stop")
    check_error(post(server, "/v1/completions", {"prompt": "x", "stop": [""]}), 400, "stop")


def test_logit_bias_bounds(server):
    bias = {str(i): 1 for i in range(2000)}
    check_error(post(server, "/v1/completions", {"prompt": "x", "logit_bias": bias}), 400, "logit_bias")
    check_error(post(server, "/v1/completions", {"prompt": "x", "logit_bias": {"10000000": 1}}), 400,
                "logit_bias")
    check_error(post(server, "/v1/completions", {"prompt": "x", "logit_bias": {"5": 1000}}), 400,
                "logit_bias")


def test_prompt_vs_context(server):
    # the test server runs with --max-model-len 1024
    check_error(post(server, "/v1/completions", {"prompt": [15] * 1100}), 400, "prompt")
    check_error(post(server, "/v1/completions", {"prompt": [15] * 1000, "max_tokens": 100}), 400,
                "max_tokens")
    check_error(post(server, "/v1/completions", {"prompt": [10 ** 7]}), 400, "prompt")
    check_error(post(server, "/v1/completions", {"prompt": ["a"] * 100}), 400, "prompt")


def test_n_and_logprobs_bounds(server):
    check_error(post(server, "/v1/completions", {"prompt": "x", "n": 129}), 400, "n")
    check_error(post(server, "/v1/completions", {"prompt": ["a"] * 8, "n": 16}), 400, "n")
    check_error(post(server, "/v1/completions", {"prompt": "x", "logprobs": 21}), 400, "logprobs")


def test_unknown_model(server):
    check_error(post(server, "/v1/completions", {"model": "gpt-4", "prompt": "x"}), 404, "model")


def test_unknown_fields_ignored(server):
    r = post(server, "/v1/completions", {"model": MODEL_NAME, "prompt": "x", "max_tokens": 1,
                                         "frobnicate": {"a": [1, 2]}, "suffix": None})
    assert r.status_code == 200, r.text


def test_tokenize_detokenize(server):
    r = post(server, "/tokenize", {"prompt": "hello world", "add_special_tokens": False})
    assert r.status_code == 200
    tokens = r.json()["tokens"]
    assert r.json()["count"] == len(tokens) > 0
    d = post(server, "/detokenize", {"tokens": tokens})
    assert d.json()["prompt"] == "hello world"
    chat = post(server, "/tokenize", {"messages": [{"role": "user", "content": "hi"}]})
    assert chat.status_code == 200 and chat.json()["count"] > 3
    check_error(post(server, "/detokenize", {"tokens": [-1]}), 400, "tokens")
    check_error(post(server, "/tokenize", {"prompt": 5}), 400, "prompt")


def test_keep_alive_and_malformed_http(server):
    s = requests.Session()
    for _ in range(3):  # one connection, several requests
        assert s.get(server.url + "/health").status_code == 200
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        data = sock.recv(4096)
        assert data.startswith(b"HTTP/1.1 400")
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100000 + b"\r\n\r\n")
        data = sock.recv(4096)
        assert data.startswith(b"HTTP/1.1 431")
    assert requests.get(server.url + "/health").status_code == 200


def test_metrics_format(server):
    text = requests.get(server.url + "/metrics").text
    for name in ["loom_requests_total", "loom_time_to_first_token_seconds_bucket",
                 "loom_time_per_output_token_seconds", "loom_inter_token_latency_seconds",
                 "loom_e2e_request_latency_seconds", "loom_num_requests_running",
                 "loom_num_requests_waiting", "loom_kv_cache_usage_ratio",
                 "loom_prefix_cache_hit_rate", "loom_preemptions_total",
                 "loom_prompt_tokens_total", "loom_generation_tokens_total",
                 "loom_request_queue_time_seconds_bucket", "loom_engine_stalled"]:
        assert name in text, name


def nvml_present():
    import ctypes
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        return lib.nvmlInit_v2() == 0
    except OSError:
        return False


def test_queue_time_ready_and_gpu_series(server):
    before = server.metrics().get("loom_request_queue_time_seconds_count", 0)
    r = requests.post(server.url + "/v1/completions",
                      json={"prompt": "Hello", "max_tokens": 2}, timeout=120)
    assert r.status_code == 200
    m = server.metrics()
    assert m["loom_request_queue_time_seconds_count"] == before + 1
    assert m['loom_request_queue_time_seconds_bucket{le="+Inf"}'] == before + 1
    assert 0 <= m["loom_request_queue_time_seconds_sum"] < 60
    # A healthy engine that just worked is ready, and the watchdog agrees.
    ready = requests.get(server.url + "/ready")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    assert m["loom_engine_stalled"] == 0
    # GPU series exactly when NVML is there (absent on CPU-only machines).
    gpu = [k for k in m if k.startswith("loom_gpu_")]
    if nvml_present():
        assert any(k.startswith('loom_gpu_utilization_ratio{gpu="0"}') for k in gpu), gpu
    else:
        assert gpu == []
    assert "loom serve: GPU metrics" in server.logs()


# --- The other APIs' routes, /v1/models/{id}, /version, strict fields ---

MESSAGES_OK = {"model": MODEL_NAME, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
RESPONSES_OK = {"model": MODEL_NAME, "input": "hi", "max_output_tokens": 4}


def check_anthropic_error(r, status):
    assert r.status_code == status, r.text
    body = r.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"} and body["error"]["message"]
    return body["error"]


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/responses"])
def test_new_routes_methods_and_malformed(server, path):
    bad_method = requests.get(server.url + path)
    assert bad_method.status_code == 405
    for body in [b"", b"{", b"[1]", b"\"x\"", b"nul", b'{"a": 1} trailing']:
        r = post(server, path, body)
        assert r.status_code == 400, (body, r.text)
    assert post(server, path, b'{"input": "a\xff"}').status_code == 400
    assert post(server, path, json.dumps({"x": "a" * (5 << 20)})).status_code == 413
    deep = '{"messages": ' + "[" * 100000 + "]" * 100000 + "}"
    assert post(server, path, deep).status_code == 400


@pytest.mark.parametrize("field,value", [
    ("max_tokens", "10"), ("max_tokens", 1.5), ("max_tokens", 0), ("max_tokens", 10 ** 30),
    ("messages", "hi"), ("messages", [{"role": "system", "content": "x"}]),
    ("messages", [{"role": "user", "content": [{"type": "text"}]}]),
    ("messages", [{"role": "user", "content": [{"type": "text", "text": "a"}] * 5000}]),
    ("system", 5), ("stop_sequences", [1]), ("stop_sequences", ["s"] * 100), ("stop_sequences", ["s" * 1000]),
    ("temperature", "hot"), ("temperature", 1e308), ("top_p", 2), ("top_k", 2.5), ("stream", "yes"),
    ("metadata", 5), ("tool_choice", {"type": "any"}),
])
def test_messages_bounds(server, field, value):
    check_anthropic_error(post(server, "/v1/messages", {**MESSAGES_OK, field: value}), 400)


def test_messages_context_and_model(server):
    long = {**MESSAGES_OK, "messages": [{"role": "user", "content": "word " * 2000}]}
    check_anthropic_error(post(server, "/v1/messages", long), 400)
    check_anthropic_error(post(server, "/v1/messages", {**MESSAGES_OK, "max_tokens": 5000}), 400)
    check_anthropic_error(post(server, "/v1/messages", {**MESSAGES_OK, "model": "x" * 100000}), 404)


@pytest.mark.parametrize("field,value", [
    ("input", {"a": 1}), ("input", [1]), ("input", [{"role": "tool", "content": "x"}]),
    ("input", [{"role": "user"}]), ("input", [{"role": "user", "content": [{"type": "input_text"}]}]),
    ("input", [{"role": "user", "content": "x"}] * 5000), ("instructions", 5),
    ("max_output_tokens", "5"), ("max_output_tokens", 10 ** 30), ("max_output_tokens", -1),
    ("temperature", -1), ("top_p", "x"), ("stream", 1), ("reasoning", "high"), ("text", "json"),
    ("truncation", "auto"),
    ("previous_response_id", "resp_x"), ("store", True),
])
def test_responses_bounds(server, field, value):
    r = post(server, "/v1/responses", {**RESPONSES_OK, field: value})
    assert r.status_code == 400, (field, value, r.text)
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]


def test_models_by_id_bounds(server):
    check_error(requests.get(server.url + "/v1/models/" + "x" * 5000), 404, "model")
    check_error(requests.get(server.url + "/v1/models/%00%ff"), 404, "model")
    check_error(requests.post(server.url + f"/v1/models/{MODEL_NAME}"), 405)
    assert requests.get(server.url + f"/v1/models/{MODEL_NAME}").json()["id"] == MODEL_NAME


def test_version_route(server):
    v = requests.get(server.url + "/version")
    assert v.status_code == 200 and {"version", "commit", "build"} <= set(v.json())
    check_error(requests.post(server.url + "/version"), 405)


def test_preflight_without_cors_is_not_allowed(server):
    # The test server runs without --allowed-origins: no CORS headers at all.
    r = requests.options(server.url + "/v1/completions",
                         headers={"Origin": "http://x.test", "Access-Control-Request-Method": "POST"})
    assert r.status_code == 405 and "Access-Control-Allow-Origin" not in r.headers


@pytest.mark.parametrize("path,body,param", [
    ("/v1/completions", {"prompt": "x", "suffix": "y"}, "suffix"),
    ("/v1/completions", {"prompt": "x", "best_of": 2}, "best_of"),
    ("/v1/completions", {"prompt": "x", "n": 2, "best_of": 1}, "best_of"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}], "reasoning_effort": "max"},
     "reasoning_effort"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}], "tool_choice": "always"},
     "tool_choice"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}],
                              "response_format": {"type": "yaml"}}, "response_format"),
    ("/v1/completions", {"prompt": "x", "service_tier": "gold"}, "service_tier"),
    ("/v1/completions", {"prompt": "x", "prompt_logprobs": 21}, "prompt_logprobs"),
    ("/v1/completions", {"prompt": "x", "prompt_logprobs": -1}, "prompt_logprobs"),
    ("/v1/completions", {"prompt": "x", "prompt_logprobs": 1.5}, "prompt_logprobs"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}], "max_tokens": 0}, "max_tokens"),
])
def test_strict_fields(server, path, body, param):
    check_error(post(server, path, body), 400, param)
