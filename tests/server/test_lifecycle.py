"""Tenants and limits, the request filter, client disconnects, SIGTERM
draining and 200 concurrent streams against `loom serve`."""
import http.client
import json
import signal
import socket
import threading
import time

import pytest
import requests

from conftest import MODEL_NAME, Server, write_json


def stream_request(port, body, headers=None, timeout=300):
    """POSTs body with stream=true on a fresh connection; returns (status, events, raw)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers=h)
    resp = conn.getresponse()
    raw = resp.read().decode()
    conn.close()
    events = [line[len("data: "):] for line in raw.split("\n") if line.startswith("data: ")]
    return resp.status, events, raw


@pytest.fixture(scope="module")
def tenant_server():
    keys = write_json({"tenants": [
        {"name": "alice", "keys": ["sk-alice"], "max_concurrent": 1, "weight": 2},
        {"name": "bob", "keys": ["sk-bob"], "tokens_per_minute": 30},
        {"name": "carol", "keys": ["sk-carol"], "max_prompt_tokens": 8},
    ]})
    rules = write_json({"deny": [{"name": "no-secrets", "pattern": "(?i)pass(word)?\\s*[:=]"}]})
    s = Server("--api-key-file", keys, "--deny-rules", rules)
    yield s
    s.stop()


def auth(key):
    return {"Authorization": f"Bearer {key}"}


def test_auth(tenant_server):
    url = tenant_server.url
    body = {"prompt": "x", "max_tokens": 1}
    r = requests.post(url + "/v1/completions", json=body)
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    r = requests.post(url + "/v1/completions", json=body, headers=auth("sk-alicf"))
    assert r.status_code == 401
    r = requests.post(url + "/v1/completions", json=body, headers=auth("sk-alice-longer"))
    assert r.status_code == 401
    assert requests.get(url + "/v1/models").status_code == 401
    assert requests.get(url + "/metrics").status_code == 401
    assert requests.get(url + "/health").status_code == 200
    assert requests.get(url + "/ready").status_code == 200
    r = requests.post(url + "/v1/completions", json=body, headers=auth("sk-alice"))
    assert r.status_code == 200, r.text


def test_openai_client_auth(tenant_server):
    openai = pytest.importorskip("openai")
    bad = openai.OpenAI(base_url=tenant_server.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    good = openai.OpenAI(base_url=tenant_server.url + "/v1", api_key="sk-carol", max_retries=0)
    assert good.models.list().data[0].id == MODEL_NAME


def test_concurrency_limit(tenant_server):
    results = {}

    def long_one():
        # Long enough to be running 0.5 s later on a fast machine (~100 tok/s).
        results["long"] = stream_request(tenant_server.port, {"prompt": "Count:", "max_tokens": 300,
                                                              "ignore_eos": True, "stream": True},
                                         auth("sk-alice"))

    t = threading.Thread(target=long_one)
    t.start()
    time.sleep(0.5)
    r = requests.post(tenant_server.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1},
                      headers=auth("sk-alice"))
    t.join()
    assert r.status_code == 429, r.text
    assert int(r.headers["Retry-After"]) >= 1
    assert r.json()["error"]["type"] == "rate_limit_error"
    assert results["long"][0] == 200
    # the slot is free again
    r = requests.post(tenant_server.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1},
                      headers=auth("sk-alice"))
    assert r.status_code == 200


def test_tokens_per_minute(tenant_server):
    url = tenant_server.url + "/v1/completions"
    body = {"prompt": "a b c d e f g h i j", "max_tokens": 20, "ignore_eos": True}
    statuses = []
    for _ in range(4):
        r = requests.post(url, json=body, headers=auth("sk-bob"))
        statuses.append(r.status_code)
        if r.status_code == 429:
            assert int(r.headers["Retry-After"]) >= 1
            break
    assert statuses[0] == 200 and statuses[-1] == 429, statuses


def test_prompt_cap_and_filter(tenant_server):
    url = tenant_server.url + "/v1/completions"
    r = requests.post(url, json={"prompt": "one two three four five six seven eight nine ten",
                                 "max_tokens": 1}, headers=auth("sk-carol"))
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    r = requests.post(url, json={"prompt": "my Password: hunter2", "max_tokens": 1},
                      headers=auth("sk-alice"))
    assert r.status_code == 400
    assert "no-secrets" in r.json()["error"]["message"]
    r = requests.post(tenant_server.url + "/v1/chat/completions",
                      json={"messages": [{"role": "user", "content": "pass = 1"}], "max_tokens": 1},
                      headers=auth("sk-alice"))
    assert r.status_code == 400
    m = tenant_server.metrics(auth("sk-alice"))
    assert m['loom_filtered_requests_total{rule="no-secrets"}'] >= 2
    assert m['loom_filtered_requests_total{rule="max_prompt_tokens"}'] >= 1
    assert m['loom_rate_limited_requests_total{tenant="alice",reason="concurrency"}'] >= 1
    assert any(k.startswith('loom_tenant_tokens_total{tenant="bob"') for k in m)


def test_bad_tenant_weight_is_refused_at_start():
    for weight in (0, -1, "2", 1e7):
        keys = write_json({"tenants": [{"name": "x", "keys": ["sk-x"], "weight": weight}]})
        with pytest.raises(RuntimeError, match="'weight' of tenant x"):
            Server("--api-key-file", keys)


def test_access_log_has_no_prompt(tenant_server):
    logs = tenant_server.logs()
    assert "access id=cmpl-" in logs and "tenant=alice" in logs
    assert "hunter2" not in logs and "Count:" not in logs


def wait_idle(server, timeout=20):
    deadline = time.time() + timeout
    m = {}
    while time.time() < deadline:
        m = server.metrics()
        if (m["loom_kv_cache_used_blocks"] == 0 and m["loom_num_requests_running"] == 0
                and m["loom_num_requests_waiting"] == 0):
            return m
        time.sleep(0.1)
    raise AssertionError(f"engine not idle: {m}")


def test_disconnect_mid_stream_frees_kv(server):
    body = json.dumps({"prompt": "Write a long story:", "max_tokens": 500, "ignore_eos": True,
                       "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while got.count(b"data: ") < 3:
        chunk = sock.recv(65536)
        assert chunk
        got += chunk
    assert got.startswith(b"HTTP/1.1 200")
    m = server.metrics()
    assert m["loom_kv_cache_used_blocks"] > 0
    sock.close()
    wait_idle(server)
    time.sleep(0.3)
    m = server.metrics()
    assert m.get('loom_requests_total{route="/v1/completions",status="499"}', 0) >= 1


def test_disconnect_non_streaming(server):
    body = json.dumps({"prompt": "Tell me everything:", "max_tokens": 500,
                       "ignore_eos": True}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                 str(len(body)).encode() + b"\r\n\r\n" + body)
    time.sleep(1.0)
    sock.close()
    wait_idle(server)


def test_many_concurrent_streams(server):
    n_clients, max_tokens = 200, 8
    prompts = [f"Item {i}:" for i in range(10)]
    reference = {}
    for p in prompts:
        r = requests.post(server.url + "/v1/completions",
                          json={"prompt": p, "max_tokens": max_tokens, "temperature": 0,
                                "ignore_eos": True})
        reference[p] = r.json()["choices"][0]["text"]
    results = [None] * n_clients

    def worker(i):
        try:
            results[i] = stream_request(server.port, {
                "prompt": prompts[i % len(prompts)], "max_tokens": max_tokens, "temperature": 0,
                "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})
        except Exception as e:  # recorded and asserted below
            results[i] = e

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    for i, res in enumerate(results):
        assert not isinstance(res, Exception) and res is not None, res
        status, events, raw = res
        assert status == 200, raw[:500]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
        assert text == reference[prompts[i % len(prompts)]], (i, text)
        assert chunks[-1]["usage"]["completion_tokens"] == max_tokens
        finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
        assert finishes[-1] == "length" and all(f is None for f in finishes[:-1])
    wait_idle(server)


def test_sigterm_drains():
    s = Server("--shutdown-timeout", "60")
    try:
        result = {}

        def streamer():
            result["r"] = stream_request(s.port, {"prompt": "Count:", "max_tokens": 30,
                                                  "ignore_eos": True, "stream": True})

        t = threading.Thread(target=streamer)
        t.start()
        time.sleep(1.0)
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.post(s.url + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=5)
        t.join(timeout=120)
        status, events, raw = result["r"]
        assert status == 200
        assert events[-1] == "[DONE]"
        texts = [json.loads(e)["choices"][0]["finish_reason"] for e in events[:-1]]
        assert texts[-1] == "length"
        assert s.proc.wait(timeout=60) == 0, s.logs()[-6000:]
    finally:
        s.stop(signal.SIGKILL)


def test_sigterm_timeout_aborts():
    s = Server("--shutdown-timeout", "1")
    try:
        result = {}

        def streamer():
            result["r"] = stream_request(s.port, {"prompt": "Count:", "max_tokens": 900,
                                                  "ignore_eos": True, "stream": True})

        t = threading.Thread(target=streamer)
        t.start()
        time.sleep(1.0)
        start = time.time()
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(timeout=30) == 0, s.logs()[-6000:]
        assert time.time() - start < 15
        t.join(timeout=30)
        status, events, _ = result["r"]
        assert status == 200 and events[-1] == "[DONE]"
        # The cut stream's last chunk says why it ended.
        finishes = [json.loads(e)["choices"][0]["finish_reason"] for e in events[:-1]]
        assert finishes[-1] == "abort" and all(f is None for f in finishes[:-1]), finishes[-3:]
    finally:
        s.stop(signal.SIGKILL)
