"""`loom router` over two real `loom serve` replicas (the default model,
one thread each), driven by the official openai client: completions and
streamed chat through the router, same-prefix requests on one replica (the
router's counters and that replica's prefix-cache hits), and a killed
replica leaves the router serving."""
import signal
import threading

import pytest

from router_harness import MODEL_NAME, Router, Server

PREFIX_CHARS = 48
SHARED = "You are a terse assistant for a router test run. "  # 50 characters > PREFIX_CHARS


@pytest.fixture(scope="module")
def cluster():
    openai = pytest.importorskip("openai")
    replicas = []
    threads = [threading.Thread(target=lambda: replicas.append(
        Server("--threads", "1", "--quiet", max_model_len=256))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if len(replicas) != 2:
        for r in replicas:
            r.stop()
        pytest.fail("a replica did not start")
    router = Router([r.url for r in replicas], "--prefix-tokens", str(PREFIX_CHARS))
    client = openai.OpenAI(base_url=router.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    yield router, replicas, client
    router.stop()
    for r in replicas:
        r.stop(sig=signal.SIGKILL)


def test_completion_and_streamed_chat(cluster):
    router, replicas, client = cluster
    c = client.completions.create(model=MODEL_NAME, prompt="def add(a, b):", max_tokens=4, temperature=0)
    assert c.choices[0].text and c.usage.completion_tokens <= 4
    chunks = list(client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Say hi"}], max_tokens=4, stream=True,
        stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text and len(chunks) >= 3
    assert chunks[-1].usage.completion_tokens <= 4
    assert [m.id for m in client.models.list().data]


def test_same_prefix_lands_on_one_replica(cluster):
    router, replicas, client = cluster
    before = router.requests_by_backend("/v1/chat/completions")
    for q in ("What is 2+2?", "Name a colour.", "Spell cat.", "Say yes."):
        client.chat.completions.create(model=MODEL_NAME, max_tokens=2, temperature=0, messages=[
            {"role": "system", "content": SHARED}, {"role": "user", "content": q}])
    after = router.requests_by_backend("/v1/chat/completions")
    grew = {b: after[b] - before.get(b, 0) for b in after if after[b] != before.get(b, 0)}
    assert list(grew.values()) == [4], grew
    home = next(r for r in replicas if r.url == next(iter(grew)))
    m = home.metrics()
    assert m["loom_prefix_cache_hit_tokens_total"] > 0  # the shared system prompt was reused
    # Different prefixes use both replicas — while both are in rotation: on a
    # loaded 2-core CI machine a health check can time out (1 s) and take a
    # replica out for a moment, and then every prefix goes to the other.
    def both_up(m):
        return sum(v for k, v in m.items() if k.startswith("loom_router_backend_up{")) == 2
    for i in range(12):
        assert router.wait_for(both_up, timeout=30), "a replica stayed out of rotation"
        client.completions.create(model=MODEL_NAME, prompt=f"{i} apples and", max_tokens=1)
    spread = router.requests_by_backend("/v1/completions")
    assert len(spread) == 2 and min(spread.values()) >= 1, spread


def test_killed_replica_leaves_the_router_serving(cluster):
    router, replicas, client = cluster
    victim = replicas[1]
    victim.stop(sig=signal.SIGKILL)
    for i in range(6):
        c = client.completions.create(model=MODEL_NAME, prompt=f"{i} pears and", max_tokens=1)
        assert c.choices
    assert router.wait_for(lambda m: m[f'loom_router_backend_up{{backend="{victim.url}"}}'] == 0)
    m = router.metrics()
    assert m[f'loom_router_backend_up{{backend="{replicas[0].url}"}}'] == 1
