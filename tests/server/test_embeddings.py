"""POST /v1/embeddings on the default model: through the official openai
client (float and base64 agree, a batch equals its inputs one by one, token
ids equal their text, usage, normalised vectors, beside a running
generation), and raw HTTP bounds (each refusal a 400 naming its field)."""
import base64
import json
import math
import struct
import threading

import openai
import pytest
import requests

from conftest import MODEL_NAME, parse_metrics


def post(server, body):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return requests.post(server.url + "/v1/embeddings", data=data,
                         headers={"Content-Type": "application/json"}, timeout=120)


def check_error(r, status, param=None):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if param is not None:
        assert err["param"] == param, err
    return err


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


TEXTS = ["The capital of France is Paris.", "def add(a, b):\n    return a + b", "embeddings", "ünïcödé ✓"]


def test_float_and_base64_agree(client):
    plain = client.embeddings.create(model=MODEL_NAME, input=TEXTS, encoding_format="float")
    assert plain.object == "list" and plain.model == MODEL_NAME
    assert [d.index for d in plain.data] == list(range(len(TEXTS)))
    width = len(plain.data[0].embedding)
    assert width == 896  # Qwen2.5-0.5B's hidden size
    for d in plain.data:
        assert len(d.embedding) == width
        assert abs(math.sqrt(sum(x * x for x in d.embedding)) - 1.0) < 1e-5  # normalised
    # The client asks for base64 by default and decodes it itself.
    default = client.embeddings.create(model=MODEL_NAME, input=TEXTS)
    raw = client.embeddings.create(model=MODEL_NAME, input=TEXTS, encoding_format="base64")
    for p, d, r in zip(plain.data, default.data, raw.data):
        assert d.embedding == p.embedding
        decoded = list(struct.unpack(f"<{width}f", base64.b64decode(r.embedding)))
        assert decoded == p.embedding
    assert plain.usage.prompt_tokens == plain.usage.total_tokens > 0


def test_batch_equals_one_by_one_and_token_ids_equal_text(client, server):
    batch = client.embeddings.create(model=MODEL_NAME, input=TEXTS, encoding_format="float")
    total = 0
    for i, text in enumerate(TEXTS):
        one = client.embeddings.create(model=MODEL_NAME, input=text, encoding_format="float")
        assert cosine(one.data[0].embedding, batch.data[i].embedding) > 0.99999
        assert max(abs(x - y) for x, y in zip(one.data[0].embedding, batch.data[i].embedding)) < 1e-4
        ids = requests.post(server.url + "/tokenize", json={"prompt": text}).json()["tokens"]
        assert one.usage.prompt_tokens == len(ids)
        total += len(ids)
        by_ids = client.embeddings.create(model=MODEL_NAME, input=ids, encoding_format="float")
        assert by_ids.data[0].embedding == one.data[0].embedding
    assert batch.usage.prompt_tokens == total
    lists = [requests.post(server.url + "/tokenize", json={"prompt": t}).json()["tokens"] for t in TEXTS[:2]]
    by_lists = client.embeddings.create(model=MODEL_NAME, input=lists, encoding_format="float")
    for i in range(2):
        assert cosine(by_lists.data[i].embedding, batch.data[i].embedding) > 0.99999


def test_beside_a_running_generation(client):
    alone = client.embeddings.create(model=MODEL_NAME, input=TEXTS[0], encoding_format="float").data[0].embedding
    done = threading.Event()

    def generate():
        client.completions.create(model=MODEL_NAME, prompt="Count: 1, 2, 3,", max_tokens=64, temperature=0,
                                  extra_body={"ignore_eos": True})
        done.set()

    t = threading.Thread(target=generate)
    t.start()
    got = [client.embeddings.create(model=MODEL_NAME, input=TEXTS[0], encoding_format="float").data[0].embedding
           for _ in range(3)]
    t.join()
    assert done.is_set()
    for g in got:
        assert cosine(g, alone) > 0.99999


def test_options_and_refusals_through_the_client(client):
    r = client.embeddings.create(model=MODEL_NAME, input="x", user="someone", encoding_format="float",
                                 extra_body={"normalize": False})
    assert abs(math.sqrt(sum(v * v for v in r.data[0].embedding)) - 1.0) > 1e-3  # not normalised
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model=MODEL_NAME, input="x", dimensions=64)
    assert e.value.body["param"] == "dimensions"
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="no-such-model", input="x")


def test_metrics_count_the_route(server, client):
    client.embeddings.create(model=MODEL_NAME, input="x")
    m = parse_metrics(requests.get(server.url + "/metrics").text)
    assert m.get('loom_requests_total{route="/v1/embeddings",status="200"}', 0) >= 1


OK = {"model": MODEL_NAME, "input": "hello"}


def test_methods_and_malformed_bodies(server):
    assert requests.get(server.url + "/v1/embeddings").status_code == 405
    for body in [b"", b"{", b"[1]", b"\"x\"", b"nul", b'{"a": 1} trailing']:
        assert post(server, body).status_code == 400, body
    check_error(post(server, b'{"input": "a\xff"}'), 400)
    assert post(server, json.dumps({"input": "a" * (5 << 20)})).status_code == 413
    deep = '{"input": ' + "[" * 100000 + "]" * 100000 + "}"
    check_error(post(server, deep), 400)


@pytest.mark.parametrize("field,value", [
    ("input", None), ("input", 5), ("input", {"a": 1}), ("input", []), ("input", ""), ("input", [[]]),
    ("input", [1, "a"]), ("input", [1.5]), ("input", [-1]), ("input", [10 ** 9]), ("input", [10 ** 30]),
    ("input", ["a", [1]]), ("input", [[[1]]]), ("input", [5] * 1025), ("input", "word " * 2000),
    ("input", ["x"] * 2049),
    ("encoding_format", "int8"), ("encoding_format", 1), ("dimensions", 64), ("dimensions", "64"),
    ("user", 5), ("user", "u" * 300), ("normalize", "yes"), ("add_special_tokens", 1),
    ("truncate_prompt_tokens", 0), ("truncate_prompt_tokens", -2), ("truncate_prompt_tokens", 1.5),
    ("priority", 10 ** 12), ("model", 5),
])
def test_field_bounds(server, field, value):
    body = {**OK, field: value}
    if value is None:
        body.pop(field)
    check_error(post(server, body), 400, field)


def test_total_tokens_bound_and_unknown_model(server):
    many = [[7] * 200] * 2000  # 400,000 tokens: over the per-request total
    check_error(post(server, {**OK, "input": many}), 400, "input")
    check_error(post(server, {**OK, "model": "x" * 100000}), 404, "model")


def test_truncate_and_unknown_fields(server):
    r = post(server, {**OK, "input": [5] * 2000, "truncate_prompt_tokens": 16, "unknown_field": [1]})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == 16
    r = post(server, {**OK, "input": [5] * 2000, "truncate_prompt_tokens": -1})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 1024  # the context
