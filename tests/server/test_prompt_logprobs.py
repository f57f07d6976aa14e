"""Prompt scoring on the default model: echo + logprobs returns the prompt
tokens' logprobs (the first null), max_tokens 0 returns the prompt alone,
vLLM's prompt_logprobs lists ranks and alternatives; and the scores agree with
the model's own generation: scoring prompt + greedy continuation gives the
continuation the logprobs it was generated with."""
import math

import pytest
import requests

from conftest import MODEL_NAME

PROMPT = "def fibonacci(n):"


def tokenize(server, text, special=True):
    return requests.post(server.url + "/tokenize",
                         json={"prompt": text, "add_special_tokens": special}).json()["tokens"]


def test_scores_match_generation(server, client):
    gen = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=8, temperature=0, logprobs=3)
    gen_lp = gen.choices[0].logprobs.token_logprobs
    ids = tokenize(server, PROMPT) + tokenize(server, gen.choices[0].text, special=False)
    scored = client.completions.create(model=MODEL_NAME, prompt=ids, max_tokens=0, echo=True, logprobs=3)
    c = scored.choices[0]
    assert c.finish_reason == "length" and scored.usage.completion_tokens == 0
    assert c.text == PROMPT + gen.choices[0].text
    lp = c.logprobs
    assert len(lp.tokens) == len(ids) and lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    for a, b in zip(lp.token_logprobs[-len(gen_lp):], gen_lp):
        assert math.isclose(a, b, abs_tol=2e-3), (a, b)
    # Greedy tokens are the argmax: each is its own top alternative.
    for tok, top in zip(lp.tokens[-len(gen_lp):], lp.top_logprobs[-len(gen_lp):]):
        assert max(top, key=top.get) == tok
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)


def test_echo_with_generation_and_n(client):
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=3, echo=True, logprobs=1, n=2,
                                  temperature=1.0, seed=3)
    n_prompt = r.usage.prompt_tokens
    for c in r.choices:
        assert c.text.startswith(PROMPT)
        assert len(c.logprobs.tokens) == n_prompt + 3
        assert c.logprobs.token_logprobs[0] is None
        assert all(v is not None and v <= 0 for v in c.logprobs.token_logprobs[1:])
    assert r.choices[0].logprobs.token_logprobs[:n_prompt] == r.choices[1].logprobs.token_logprobs[:n_prompt]


def test_echo_max_tokens_zero_without_logprobs(client):
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=0, echo=True)
    assert r.choices[0].text == PROMPT and r.choices[0].logprobs is None
    assert r.usage.completion_tokens == 0


def test_streamed_echo_carries_prompt_logprobs(client):
    chunks = [c for c in client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=2, echo=True,
                                                   logprobs=0, stream=True, temperature=0) if c.choices]
    first = chunks[0].choices[0]
    assert first.text.startswith(PROMPT)
    assert first.logprobs.token_logprobs[0] is None
    total = sum(len(c.choices[0].logprobs.tokens) for c in chunks if c.choices[0].logprobs)
    prompt_len = len(requests.post(client.base_url.__str__().replace("/v1/", "/tokenize"),
                                   json={"prompt": PROMPT}).json()["tokens"])
    assert total == prompt_len + 2


@pytest.mark.parametrize("path,extra", [
    ("/v1/completions", {"prompt": PROMPT}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
])
def test_vllm_prompt_logprobs(server, path, extra):
    r = requests.post(server.url + path, json={"model": MODEL_NAME, "max_tokens": 1, "prompt_logprobs": 2,
                                               "temperature": 0, **extra}, timeout=120)
    assert r.status_code == 200, r.text
    plp = r.json()["choices"][0]["prompt_logprobs"]
    assert plp[0] is None and len(plp) == r.json()["usage"]["prompt_tokens"]
    for entry in plp[1:]:
        ranks = {v["rank"] for v in entry.values()}
        assert len(entry) in (2, 3) and {1, 2} <= ranks, entry  # the token, and the 2 best
        assert all(v["logprob"] <= 0 and isinstance(v["decoded_token"], str) for v in entry.values())
    # max_tokens 0 with prompt_logprobs 0: the prompt scored (the token alone), nothing generated.
    z = requests.post(server.url + path, json={"model": MODEL_NAME, "max_tokens": 0, "prompt_logprobs": 0,
                                               **extra}, timeout=120).json()
    assert z["usage"]["completion_tokens"] == 0 and z["choices"][0]["finish_reason"] == "length"
    for alone, full in zip(z["choices"][0]["prompt_logprobs"][1:], plp[1:]):
        ((token, score),) = alone.items()
        assert token in full and score["rank"] == full[token]["rank"]
        assert abs(score["logprob"] - full[token]["logprob"]) < 1e-4
