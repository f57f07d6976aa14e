"""`loom router` against fake replicas (Python HTTP servers in this process):
streams pass through chunk by chunk, headers pass through, a refused replica
is taken out and its requests retried elsewhere, a client that goes away
closes the upstream connection, bounds and the router's own routes. Fast: no
model is loaded."""
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from router_harness import Router


class FakeReplica:
    """A loom-serve-shaped HTTP server: /ready, /metrics, /v1/completions
    (SSE when stream is set, JSON otherwise)."""

    def __init__(self, name):
        self.name = name
        self.seen = []  # (path, headers) of proxied requests
        self.disconnects = 0
        self.ready_status = 200
        self.status = 200  # answer to /v1/completions
        self.waiting = 0
        self.dead = False
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def reply(self, status, body, ctype="application/json", extra=()):
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                for k, v in extra:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def gone(self):
                # A killed replica: kept-alive connections die without an answer too.
                if outer.dead:
                    self.close_connection = True
                return outer.dead

            def do_GET(self):
                if self.gone():
                    return
                if self.path == "/ready":
                    return self.reply(outer.ready_status, "{}")
                if self.path == "/metrics":
                    return self.reply(200, "# TYPE loom_num_requests_waiting gauge\n"
                                      f"loom_num_requests_waiting {outer.waiting}\n"
                                      "loom_num_requests_running 0\nloom_kv_cache_usage_ratio 0.25\n",
                                      "text/plain")
                outer.seen.append((self.path, dict(self.headers)))
                return self.reply(200, json.dumps({"object": "list", "data": [{"id": outer.name}]}))

            def do_POST(self):
                if self.gone():
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.seen.append((self.path, dict(self.headers)))
                if outer.status != 200:
                    return self.reply(outer.status, json.dumps({"error": {"message": outer.name}}),
                                      extra=[("Retry-After", "7")])
                if not body.get("stream"):
                    return self.reply(200, json.dumps({"replica": outer.name, "prompt": body["prompt"]}))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for i in range(body.get("max_tokens", 5)):
                        event = f'data: {json.dumps({"choices": [{"text": f"{outer.name}-{i}"}]})}\n\n'.encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                        self.wfile.flush()
                        time.sleep(body.get("delay", 0.2))
                    done = b"data: [DONE]\n\n"
                    self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
                except (BrokenPipeError, ConnectionResetError):
                    outer.disconnects += 1
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def completions(self):
        return sum(1 for p, _ in self.seen if p == "/v1/completions")

    def kill(self):
        self.dead = True
        self.close()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def dead_url():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there: connections are refused
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def fakes():
    fs = [FakeReplica("a"), FakeReplica("b")]
    yield fs
    for f in fs:
        f.close()


def sse_texts(lines):
    out = []
    for line in lines:
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            out.append(json.loads(line[6:])["choices"][0]["text"])
    return out


def test_stream_passes_through_chunk_by_chunk(fakes):
    router = Router([f.url for f in fakes])
    try:
        t0 = time.time()
        r = requests.post(router.url + "/v1/completions", stream=True, timeout=30,
                          json={"prompt": "stream me", "stream": True, "max_tokens": 6, "delay": 0.3})
        assert r.status_code == 200 and r.headers["Content-Type"] == "text/event-stream"
        arrivals, texts = [], []
        for line in r.iter_lines():
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                arrivals.append(time.time() - t0)
                texts += sse_texts([line])
        assert len(texts) == 6 and texts[0].endswith("-0") and texts[5].endswith("-5")
        # The first chunk arrives long before the replica finished (6 x 0.3 s).
        assert arrivals[0] < 1.0, arrivals
        assert arrivals[-1] - arrivals[0] > 1.0, arrivals
    finally:
        router.stop()


def test_headers_and_bodies_pass_through(fakes):
    router = Router([f.url for f in fakes])
    try:
        r = requests.post(router.url + "/v1/completions", json={"prompt": "hello"},
                          headers={"Authorization": "Bearer sk-test", "X-Request-Id": "abc"}, timeout=10)
        assert r.status_code == 200 and r.json()["prompt"] == "hello"
        served = next(f for f in fakes if f.seen)
        headers = {k.lower(): v for k, v in served.seen[-1][1].items()}
        assert headers["authorization"] == "Bearer sk-test"
        assert headers["x-request-id"] == "abc"
        assert headers["x-forwarded-for"] == "127.0.0.1"
        # Error statuses, bodies and Retry-After come back as the replica sent them.
        for f in fakes:
            f.status = 429
        r = requests.post(router.url + "/v1/completions", json={"prompt": "x"}, timeout=10)
        assert r.status_code == 429 and r.headers["Retry-After"] == "7"
        assert r.json()["error"]["message"] in ("a", "b")
        r = requests.get(router.url + "/v1/models", timeout=10)
        assert r.status_code == 200 and r.json()["data"][0]["id"] in ("a", "b")
    finally:
        router.stop()


def test_same_prefix_same_replica_and_balance(fakes):
    router = Router([f.url for f in fakes], "--prefix-tokens", "32")
    try:
        shared = "S" * 40
        for i in range(6):
            r = requests.post(router.url + "/v1/completions", json={"prompt": shared + str(i)}, timeout=10)
            assert r.status_code == 200
        counts = sorted(f.completions() for f in fakes)
        assert counts == [0, 6], counts
        replicas = set()
        for i in range(16):
            r = requests.post(router.url + "/v1/completions", json={"prompt": f"{i} distinct"}, timeout=10)
            replicas.add(r.json()["replica"])
        assert replicas == {"a", "b"}
        m = router.metrics()
        assert m['loom_router_routing_decisions_total{decision="affinity"}'] == 22
    finally:
        router.stop()


def test_overloaded_replica_spills(fakes):
    # Streams held open make the prefix's replica busy; the next ones spill.
    router = Router([f.url for f in fakes], "--prefix-tokens", "16", "--spill-margin", "1",
                    "--spill-ratio", "1.5")
    try:
        body = {"prompt": "P" * 20, "stream": True, "max_tokens": 10, "delay": 0.2}
        streams = [requests.post(router.url + "/v1/completions", json=body, stream=True, timeout=30)
                   for _ in range(4)]
        for s in streams:
            assert s.status_code == 200
        counts = sorted(f.completions() for f in fakes)
        assert counts[0] >= 1, counts
        for s in streams:
            s.close()
        m = router.metrics()
        assert m['loom_router_routing_decisions_total{decision="spill"}'] >= 1
    finally:
        router.stop()


def test_refused_replica_is_retried_elsewhere_and_taken_out(fakes):
    a, b = fakes
    router = Router([a.url, b.url], "--health-interval", "60")
    try:
        assert router.wait_for(lambda m: m.get(f'loom_router_health_checks_total{{backend="{b.url}",result="up"}}'))
        b.kill()  # refuses connections from now on; no health check will notice for a minute
        for i in range(12):  # some of these hash to b (all on a: p = 2^-12)
            r = requests.post(router.url + "/v1/completions", json={"prompt": f"p{i}"}, timeout=10)
            assert r.status_code == 200, r.text
            assert r.json()["replica"] == "a"
        m = router.metrics()
        assert m['loom_router_retries_total{reason="connect_failed"}'] == 1  # then b is out
        assert m[f'loom_router_backend_up{{backend="{b.url}"}}'] == 0
        assert m[f'loom_router_backend_up{{backend="{a.url}"}}'] == 1
        assert requests.get(router.url + "/ready", timeout=5).status_code == 200
    finally:
        router.stop()


def test_replica_back_after_health_check(fakes):
    router = Router([f.url for f in fakes])
    try:
        fakes[1].ready_status = 503
        assert router.wait_for(lambda m: m[f'loom_router_backend_up{{backend="{fakes[1].url}"}}'] == 0)
        for i in range(6):
            assert requests.post(router.url + "/v1/completions", json={"prompt": f"q{i}"},
                                 timeout=10).json()["replica"] == "a"
        fakes[1].ready_status = 200
        assert router.wait_for(lambda m: m[f'loom_router_backend_up{{backend="{fakes[1].url}"}}'] == 1)
        # Scraped load shows in the router's metrics.
        fakes[0].waiting = 3
        assert router.wait_for(lambda m: m[f'loom_router_backend_waiting{{backend="{fakes[0].url}"}}'] == 3)
    finally:
        router.stop()


def test_unavailable_replica_503_is_retried(fakes):
    router = Router([f.url for f in fakes])
    try:
        fakes[0].status = 503
        for i in range(6):
            r = requests.post(router.url + "/v1/completions", json={"prompt": f"r{i}"}, timeout=10)
            assert r.status_code == 200 and r.json()["replica"] == "b"
    finally:
        router.stop()


def test_client_disconnect_closes_upstream(fakes):
    router = Router([fakes[0].url])
    try:
        r = requests.post(router.url + "/v1/completions", stream=True, timeout=30,
                          json={"prompt": "long", "stream": True, "max_tokens": 100, "delay": 0.1})
        it = r.iter_lines()
        assert next(l for l in it if l.startswith(b"data: "))
        r.close()  # the client goes away mid-stream
        deadline = time.time() + 5
        while fakes[0].disconnects == 0 and time.time() < deadline:
            time.sleep(0.05)
        assert fakes[0].disconnects == 1
        assert router.wait_for(lambda m: m["loom_router_client_disconnects_total"] == 1)
    finally:
        router.stop()


def test_own_routes_and_bounds(fakes):
    dead = dead_url()
    router = Router([dead], "--max-body-bytes", "4096")
    try:
        assert requests.get(router.url + "/health", timeout=5).status_code == 200
        assert router.wait_for(lambda m: m[f'loom_router_backend_up{{backend="{dead}"}}'] == 0)
        r = requests.get(router.url + "/ready", timeout=5)
        assert r.status_code == 503
        r = requests.post(router.url + "/v1/completions", json={"prompt": "x"}, timeout=5)
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
        assert r.json()["error"]["message"] == "no replica is available"
        assert requests.get(router.url + "/nope", timeout=5).status_code == 404
        r = requests.post(router.url + "/v1/completions", json={"prompt": "x" * 10000}, timeout=5)
        assert r.status_code == 413
    finally:
        router.stop()
    assert router.proc.returncode == 0


def test_backends_from_dns(fakes):
    port = fakes[0].url.rsplit(":", 1)[1]
    router = Router([], "--backends-dns", f"localhost:{port}")
    try:
        assert router.wait_for(lambda m: m.get(f'loom_router_backend_up{{backend="http://127.0.0.1:{port}"}}') == 1)
        r = requests.post(router.url + "/v1/completions", json={"prompt": "dns"}, timeout=10)
        assert r.status_code == 200 and r.json()["replica"] == "a"
        assert router.metrics()["loom_router_backends"] >= 1
    finally:
        router.stop()
