"""`loom` as an operator meets it: vLLM's flag spellings, --help with defaults,
a mistyped flag named with the closest one, --version and /version, the port
bound before the model loads, /v1/models/{id}, CORS, a public /metrics with
process and build series, JSON logs, and the load progress lines."""
import json
import socket
import subprocess
import time

import pytest
import requests

from conftest import LOOM, MODEL, LoomProcess, Server


def loom(*args, timeout=60):
    return subprocess.run([LOOM, *args], capture_output=True, text=True, timeout=timeout)


def test_version():
    r = loom("--version")
    assert r.returncode == 0
    assert r.stdout.startswith("loom ") and "commit " in r.stdout


@pytest.mark.parametrize("command", [["serve"], ["generate"], ["bench", "latency"], ["bench", "serve"],
                                     ["bench", "offline"], ["bench", "workload"], ["router"]])
def test_help_shows_defaults(command):
    r = loom(*command, "--help")
    assert r.returncode == 0, r.stderr
    # CLI11 prints a captured default as TYPE=VALUE.
    assert "=" in r.stdout.split("Options:", 1)[1], r.stdout


def test_serve_help_defaults_and_vllm_flags():
    out = loom("serve", "--help").stdout
    for text in ["--port UINT=8000", "--host TEXT=127.0.0.1", "--max-model-len", "--served-model-name",
                 "--chat-template", "--dtype", "--seed", "--enable-prefix-caching",
                 "--no-enable-prefix-caching", "--log-level", "--log-format", "--allowed-origins",
                 "--disable-log-requests", "--metrics-public", "Positionals:"]:
        assert text in out, text


def test_bench_help_lists_every_benchmark():
    r = loom("bench", "--help")
    assert r.returncode == 0
    for name in ["latency", "offline", "serve", "workload"]:
        assert f"\n  {name} " in r.stdout, name
    bad = loom("bench", "nope")
    assert bad.returncode == 2 and "unknown benchmark 'nope'" in bad.stderr and "serve" in bad.stderr


def test_kv_cache_past_the_machines_memory_is_refused_at_start():
    # An impossible CPU cache budget fails at start-up with a clear message,
    # not by swapping or the OOM killer.
    r = loom("generate", "--model", MODEL, "--prompt", "hi", "--max-tokens", "1",
             "--kv-cache-memory", "100000GiB", timeout=120)
    assert r.returncode != 0
    assert "not enough memory: --kv-cache-memory 100000GiB" in r.stderr, r.stderr
    assert "lower --kv-cache-memory" in r.stderr


def test_unknown_flag_suggests_closest():
    r = loom("serve", MODEL, "--max-model-length", "512")
    assert r.returncode == 2
    assert "unknown flag '--max-model-length'" in r.stderr
    assert "did you mean '--max-model-len'" in r.stderr
    r = loom("bench", "serve", "--request-rat", "1")
    assert "unknown flag '--request-rat'" in r.stderr and "'--request-rate'" in r.stderr
    r = loom("serve", MODEL, "--zzzzzzzzzz")
    assert "unknown flag '--zzzzzzzzzz'" in r.stderr and "did you mean" not in r.stderr


def test_port_in_use_fails_before_loading():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        t0 = time.time()
        r = loom("serve", MODEL, "--port", str(port))
        assert r.returncode == 1
        assert "cannot listen" in r.stderr
        assert "loading weights" not in r.stderr  # failed before the model was touched
        assert time.time() - t0 < 10


def test_dtype_refused_when_the_backend_computes_in_another():
    r = loom("serve", MODEL, "--port", "0", "--dtype", "bfloat16", "--device", "cpu")
    assert r.returncode == 1
    assert "--dtype bfloat16" in r.stderr and "computes in" in r.stderr


def test_chat_template_string_must_look_like_one():
    r = loom("serve", MODEL, "--port", "0", "--chat-template", "no-such-file.jinja")
    assert r.returncode == 1 and "--chat-template no-such-file.jinja" in r.stderr


@pytest.fixture(scope="module")
def ops_server():
    """Positional model, vLLM spellings, API key + public metrics, CORS, JSON logs."""
    s = LoomProcess([
        "serve", MODEL, "--port", "0", "--max-model-len", "512", "--kv-cache-memory", "256MiB",
        "--served-model-name", "first", "second", "--seed", "7", "--no-enable-prefix-caching",
        "--dtype", "auto", "--chat-template", "{% for m in messages %}[{{ m.content }}]{% endfor %}",
        "--api-key", "sekret", "--metrics-public", "--allowed-origins", "http://ok.test",
        "--log-format", "json", "--disable-log-requests"], "serve", startup_s=120)
    yield s
    s.stop()


def test_models_and_model_by_id(ops_server):
    h = {"Authorization": "Bearer sekret"}
    ids = [m["id"] for m in requests.get(ops_server.url + "/v1/models", headers=h).json()["data"]]
    assert ids == ["first", "second"]
    one = requests.get(ops_server.url + "/v1/models/second", headers=h)
    assert one.status_code == 200 and one.json()["id"] == "second" and one.json()["object"] == "model"
    missing = requests.get(ops_server.url + "/v1/models/nope", headers=h)
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "model"
    # Any served name works, and the response reports the one asked for.
    r = requests.post(ops_server.url + "/v1/completions", headers=h,
                      json={"model": "second", "prompt": "hi", "max_tokens": 2})
    assert r.status_code == 200 and r.json()["model"] == "second"


def test_api_key_headers_and_public_metrics(ops_server):
    assert requests.get(ops_server.url + "/v1/models").status_code == 401
    assert requests.get(ops_server.url + "/v1/models", headers={"x-api-key": "sekret"}).status_code == 200
    assert requests.get(ops_server.url + "/v1/models", headers={"x-api-key": "wrong"}).status_code == 401
    m = requests.get(ops_server.url + "/metrics")
    assert m.status_code == 200
    for name in ["process_resident_memory_bytes", "process_open_fds", "process_cpu_seconds_total",
                 "process_start_time_seconds", "loom_build_info{"]:
        assert name in m.text, name
    metrics = ops_server.metrics()
    assert metrics["process_resident_memory_bytes"] > 100e6  # the model is resident
    assert metrics["process_open_fds"] >= 3


def test_version_route(ops_server):
    v = requests.get(ops_server.url + "/version")  # open, like /health
    assert v.status_code == 200
    body = v.json()
    assert body["version"] and body["commit"]
    assert {"type", "compiler", "cuda", "mpi"} <= set(body["build"])
    assert f'version="{body["version"]}"' in requests.get(ops_server.url + "/metrics").text
    assert loom("--version").stdout.startswith(f'loom {body["version"]} (commit {body["commit"]}')


def test_cors(ops_server):
    pre = requests.options(ops_server.url + "/v1/chat/completions",
                           headers={"Origin": "http://ok.test", "Access-Control-Request-Method": "POST",
                                    "Access-Control-Request-Headers": "authorization,content-type"})
    assert pre.status_code == 204
    assert pre.headers["Access-Control-Allow-Origin"] == "http://ok.test"
    assert "POST" in pre.headers["Access-Control-Allow-Methods"]
    assert "authorization" in pre.headers["Access-Control-Allow-Headers"].lower()
    denied = requests.options(ops_server.url + "/v1/chat/completions",
                              headers={"Origin": "http://evil.test", "Access-Control-Request-Method": "POST"})
    assert denied.status_code == 403 and "Access-Control-Allow-Origin" not in denied.headers
    r = requests.post(ops_server.url + "/v1/chat/completions",
                      headers={"Origin": "http://ok.test", "Authorization": "Bearer sekret"},
                      json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": True})
    assert r.status_code == 200 and r.headers["Access-Control-Allow-Origin"] == "http://ok.test"
    other = requests.get(ops_server.url + "/health", headers={"Origin": "http://evil.test"})
    assert "Access-Control-Allow-Origin" not in other.headers


def test_chat_template_flag_is_used(ops_server):
    h = {"Authorization": "Bearer sekret"}
    chat = requests.post(ops_server.url + "/tokenize", headers=h,
                         json={"messages": [{"role": "user", "content": "hello"}]}).json()["tokens"]
    plain = requests.post(ops_server.url + "/tokenize", headers=h,
                          json={"prompt": "[hello]", "add_special_tokens": False}).json()["tokens"]
    assert chat == plain


def test_json_logs_and_no_access_lines(ops_server):
    requests.post(ops_server.url + "/v1/completions", headers={"Authorization": "Bearer sekret"},
                  json={"prompt": "x", "max_tokens": 1})
    lines = [line for line in ops_server.logs().splitlines() if line.strip()]
    parsed = [json.loads(line) for line in lines]  # every line is one JSON object
    messages = [p["message"] for p in parsed]
    assert all({"level", "message"} <= set(p) for p in parsed)
    assert any("loading weights: " in m and "tensors" in m for m in messages)
    assert any(m.startswith("loom: weights loaded") for m in messages)
    assert any("prefix caching off" in m for m in messages)
    assert not any(m.startswith("access ") for m in messages)


def test_log_level_warning_hides_info():
    s = Server("--log-level", "warning")
    try:
        requests.post(s.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1})
        logs = s.logs()
        assert "listening on" in logs
        assert "[info]" not in logs and "access " not in logs
    finally:
        s.stop()


def test_anthropic_client_sends_x_api_key(ops_server):
    anthropic = pytest.importorskip("anthropic")
    ok = anthropic.Anthropic(base_url=ops_server.url, api_key="sekret", max_retries=0)
    m = ok.messages.create(model="second", max_tokens=2, messages=[{"role": "user", "content": "hi"}])
    assert m.model == "second" and m.usage.output_tokens == 2
    bad = anthropic.Anthropic(base_url=ops_server.url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        bad.messages.create(model="second", max_tokens=2, messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "authentication_error"
