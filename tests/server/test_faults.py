"""Fault injection against `loom serve` (CI: scripts/test.sh runs this file on
its own): a client that disconnects at every SSE event boundary of a stream,
SIGTERM at random moments under mixed load, a backend step that throws, and
an engine thread that stalls. Backend faults are injected by the hidden
`--test-fault-file` flag (src/backend/fault_injection_backend.h): the test
writes a command, the next forward step reads it."""
import http.client
import json
import os
import pathlib
import random
import signal
import socket
import tempfile
import threading
import time

import pytest
import requests

from conftest import Server

WATCHDOG_S = 2


def rss_anon_kb(pid):
    """Anonymous resident memory: the heap. (The model file is mmapped, so the
    whole RSS also grows as pages of the weights are first read.)"""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError("no RssAnon")


def wait_idle(server, timeout=30):
    deadline = time.time() + timeout
    m = {}
    while time.time() < deadline:
        m = server.metrics()
        if (m["loom_kv_cache_used_blocks"] == 0 and m["loom_num_requests_running"] == 0
                and m["loom_num_requests_waiting"] == 0 and m["loom_http_requests_in_flight"] == 0):
            return m
        time.sleep(0.05)
    raise AssertionError(f"not idle: {m}")


class FaultServer(Server):
    def __init__(self, *extra):
        self.fault_file = tempfile.mktemp(prefix="loom-fault-")
        super().__init__("--test-fault-file", self.fault_file, "--watchdog", str(WATCHDOG_S), *extra)

    def inject(self, command):
        tmp = self.fault_file + ".tmp"
        pathlib.Path(tmp).write_text(command + "\n")
        os.replace(tmp, self.fault_file)  # whole, or not at all


@pytest.fixture(scope="module")
def fault_server():
    s = FaultServer()
    yield s
    s.stop()


def open_stream(port, body, path="/v1/completions"):
    data = json.dumps({**body, "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=120)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return sock


def complete_events(buf):
    return sum(1 for part in buf.split(b"\n\n")[:-1] if b"data: " in part)


def read_events(sock, count):
    """Reads until `count` SSE events have arrived whole (or the stream ends)."""
    buf = b""
    while complete_events(buf) < count:
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf


def read_until_done(sock, buf=b""):
    while b"data: [DONE]" not in buf:
        chunk = sock.recv(65536)
        assert chunk, buf[-300:]
        buf += chunk
    return buf


def stream_events(port, body, path="/v1/completions", timeout=300):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", path, body=json.dumps({**body, "stream": True}),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    raw = resp.read().decode()
    conn.close()
    return resp.status, [l[6:] for l in raw.split("\n") if l.startswith("data: ")], raw


def test_disconnect_at_every_event_boundary(fault_server):
    s = fault_server
    body = {"prompt": "Tell a story:", "max_tokens": 10, "ignore_eos": True, "n": 2}
    status, events, _ = stream_events(s.port, body)
    assert status == 200 and events[-1] == "[DONE]"
    boundaries = len(events)  # every data: event, [DONE] included
    # One pass to warm up, then the heap must come back each time.
    for k in range(boundaries + 1):
        sock = open_stream(s.port, body)
        read_events(sock, k)
        sock.close()
    wait_idle(s)
    time.sleep(0.5)
    base = rss_anon_kb(s.proc.pid)
    for k in range(boundaries + 1):
        sock = open_stream(s.port, body)
        got = read_events(sock, k)
        sock.close()
        if k > 0:
            assert got.startswith(b"HTTP/1.1 200"), got[:200]
        wait_idle(s)
        grown = rss_anon_kb(s.proc.pid) - base
        assert grown < 2048, f"heap grew {grown} KiB after a disconnect at event {k}"
    assert requests.get(s.url + "/ready").status_code == 200


def disconnect_burst(port, count, threads=6):
    """`count` streams, each dropped after its first 1..4 events."""
    body = {"prompt": "Tell a story:", "max_tokens": 8, "ignore_eos": True}
    todo = list(range(count))
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop()
            sock = open_stream(port, body)
            read_events(sock, 1 + i % 4)
            sock.close()

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()


def wait_heap_trim(server, timeout=60):
    """Waits for the server's next heap trim (every 10 s after requests finished)."""
    before = server.metrics().get("loom_heap_trims_total", 0)
    deadline = time.time() + timeout
    while server.metrics().get("loom_heap_trims_total", 0) == before:
        assert time.time() < deadline, "no heap trim"
        time.sleep(0.2)


# Resident memory crept up with mid-stream disconnects (3-7 KB each, still
# rising after 7,500): the live heap did not grow, but malloc kept what the
# server's threads freed. Now the server gives it back.
def test_memory_back_after_many_disconnects(fault_server):
    s = fault_server
    # A first burst as large as the measured ones: the engine's buffers reach
    # the batch sizes this machine's load gives them (larger under load). A
    # later burst may still meet a larger step once and grow a buffer (tens of
    # MB of logits); a leak grows the heap in every burst. So: two measured
    # bursts, and the smaller growth must stay under 2 KB a disconnect.
    count = 150

    def burst():
        disconnect_burst(s.port, count)
        wait_idle(s)
        wait_heap_trim(s)
        return rss_anon_kb(s.proc.pid)

    base = burst()
    second = burst()
    third = burst()
    grown = min(second - base, third - second)
    assert grown * 1024 / count < 2048, (
        f"heap grew {second - base} then {third - second} KiB over bursts of {count} disconnects")


def test_backend_step_that_throws(fault_server):
    s = fault_server
    body = {"prompt": "Say something:", "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    before = requests.post(s.url + "/v1/completions", json=body, timeout=120).json()
    # A failure on the first step: nothing streamed yet, so a plain 500.
    s.inject("throw")
    r = requests.post(s.url + "/v1/completions", json=body, timeout=120)
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    ready = requests.get(s.url + "/ready")
    assert ready.status_code == 503 and ready.json()["status"] == "engine failing"
    # A failure in the middle of a stream: an error event, then [DONE].
    sock = open_stream(s.port, {**body, "max_tokens": 60})
    got = read_events(sock, 3)
    s.inject("throw")
    got = read_until_done(sock, got)
    sock.close()
    events = [l[6:] for l in got.decode().split("\n") if l.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert "error" in json.loads(events[-2]), events[-2]
    assert requests.get(s.url + "/ready").status_code == 503
    assert requests.get(s.url + "/health").status_code == 200
    # The server stays up and serves the same answer as before the faults
    # (no KV block of a failed step is reused from the prefix cache).
    after = requests.post(s.url + "/v1/completions", json=body, timeout=120)
    assert after.status_code == 200
    assert after.json()["choices"][0]["text"] == before["choices"][0]["text"]
    assert requests.get(s.url + "/ready").status_code == 200
    m = s.metrics()
    assert m["loom_engine_errors_total"] >= 2
    wait_idle(s)


def poll_ready_until_503(s, within):
    start = time.time()
    while time.time() - start < within:
        r = requests.get(s.url + "/ready", timeout=2)
        if r.status_code == 503:
            assert r.json()["status"] == "stalled", r.text
            return time.time() - start
        time.sleep(0.1)
    raise AssertionError(f"/ready stayed 200 for {within} s")


@pytest.mark.parametrize("from_idle", [True, False])
def test_stalled_engine_fails_ready(fault_server, from_idle):
    s = fault_server
    wait_idle(s)
    assert requests.get(s.url + "/ready").status_code == 200
    stall = WATCHDOG_S * 3
    result = {}
    if from_idle:
        time.sleep(1.0)  # the engine has been idle a while
        s.inject(f"stall {stall}")
        t = threading.Thread(target=lambda: result.update(r=stream_events(
            s.port, {"prompt": "Hello", "max_tokens": 4, "ignore_eos": True})))
        t.start()
    else:
        sock = open_stream(s.port, {"prompt": "Count:", "max_tokens": 40, "ignore_eos": True})
        read_events(sock, 3)
        s.inject(f"stall {stall}")
    # Within the window plus the monitor's look and the /ready poll.
    took = poll_ready_until_503(s, WATCHDOG_S + 2.5)
    assert took <= WATCHDOG_S + 2.5
    m = s.metrics()
    assert m["loom_engine_stalled"] == 1
    # The step ends; the engine is ready again and the request completes.
    deadline = time.time() + stall + 30
    while requests.get(s.url + "/ready").status_code != 200:
        assert time.time() < deadline
        time.sleep(0.2)
    if from_idle:
        t.join(timeout=120)
        status, events, _ = result["r"]
        assert status == 200 and events[-1] == "[DONE]"
    else:
        read_until_done(sock)
        sock.close()
    wait_idle(s)


def check_stream(res):
    """Every choice ends with a finish_reason, or the stream with an error event."""
    status, events, raw = res
    if status == 503:
        return "refused"
    assert status == 200, raw[:300]
    assert events and events[-1] == "[DONE]", raw[-300:]
    chunks = [json.loads(e) for e in events[:-1]]
    if chunks and "error" in chunks[-1]:
        return "error"
    finishes = {}
    for c in chunks:
        for ch in c.get("choices", []):
            if ch.get("finish_reason"):
                finishes[ch["index"]] = ch["finish_reason"]
    assert finishes and all(finishes.values()), raw[-500:]
    return "abort" if "abort" in finishes.values() else "done"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigterm_at_a_random_moment_under_mixed_load(seed):
    rnd = random.Random(seed)
    s = Server("--shutdown-timeout", str(rnd.choice([1, 2, 30])))
    outcomes, failures = [], []
    stop = threading.Event()

    def client(i):
        crnd = random.Random(seed * 100 + i)
        while not stop.is_set():
            kind = crnd.choice(["stream", "stream", "chat", "plain", "long"])
            try:
                if kind == "plain":
                    r = requests.post(s.url + "/v1/completions", timeout=120, json={
                        "prompt": "Hi", "max_tokens": crnd.randint(1, 20), "ignore_eos": True})
                    assert r.status_code in (200, 503), r.text
                    if r.status_code == 200:
                        assert all(c["finish_reason"] for c in r.json()["choices"])
                    outcomes.append(str(r.status_code))
                elif kind == "chat":
                    outcomes.append(check_stream(stream_events(s.port, {
                        "messages": [{"role": "user", "content": "Hi"}], "max_tokens": crnd.randint(1, 30),
                        "n": crnd.choice([1, 2])}, path="/v1/chat/completions")))
                else:
                    outcomes.append(check_stream(stream_events(s.port, {
                        "prompt": "Go:", "ignore_eos": True,
                        "max_tokens": 400 if kind == "long" else crnd.randint(1, 30)})))
            except (requests.ConnectionError, ConnectionError, http.client.RemoteDisconnected):
                outcomes.append("connection closed")  # after the listener closed
                if not stop.is_set() and s.proc.poll() is None and not terminated.is_set():
                    failures.append(f"{kind}: connection dropped before SIGTERM")
            except AssertionError as e:
                failures.append(f"{kind}: {e}")

    terminated = threading.Event()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
    try:
        for t in threads:
            t.start()
        time.sleep(rnd.uniform(0.5, 5.0))
        terminated.set()
        s.proc.send_signal(signal.SIGTERM)
        code = s.proc.wait(timeout=90)
        stop.set()
        for t in threads:
            t.join(timeout=120)
        assert code == 0
        assert not failures, failures[:5]
        assert outcomes, "no request finished"
    finally:
        stop.set()
        s.stop(signal.SIGKILL)
