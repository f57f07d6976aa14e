"""`loom serve` through the official openai package: chat and completions,
streaming and not, n>1, stop, seed reproducibility, logprobs, usage, models."""
import pytest

from conftest import MODEL_NAME


def test_models_list(client):
    models = client.models.list()
    ids = [m.id for m in models.data]
    assert ids == [MODEL_NAME]


def test_completion(client):
    r = client.completions.create(model=MODEL_NAME, prompt="def add(a, b):", max_tokens=8,
                                  temperature=0)
    assert r.object == "text_completion"
    assert r.id.startswith("cmpl-")
    assert len(r.choices) == 1
    c = r.choices[0]
    assert c.index == 0 and c.finish_reason in ("stop", "length")
    assert isinstance(c.text, str) and c.text
    assert r.usage.prompt_tokens > 0
    assert 0 < r.usage.completion_tokens <= 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat(client):
    r = client.chat.completions.create(
        model=MODEL_NAME, max_tokens=8, temperature=0,
        messages=[{"role": "system", "content": "You are terse."},
                  {"role": "user", "content": "Say hello."}])
    assert r.object == "chat.completion"
    m = r.choices[0].message
    assert m.role == "assistant" and m.content
    assert r.usage.completion_tokens > 0 and r.usage.prompt_tokens > 10


def test_chat_content_parts(client):
    r = client.chat.completions.create(
        model=MODEL_NAME, max_tokens=4, temperature=0,
        messages=[{"role": "user", "content": [{"type": "text", "text": "Say"},
                                               {"type": "text", "text": "hello."}]}])
    assert r.choices[0].message.content


def test_streaming_matches_non_streaming(client):
    kwargs = dict(model=MODEL_NAME, prompt="The capital of France is", max_tokens=10,
                  temperature=0)
    full = client.completions.create(**kwargs)
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True},
                                            **kwargs))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == full.choices[0].text
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [full.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens


def test_chat_streaming(client):
    kwargs = dict(model=MODEL_NAME, max_tokens=12, temperature=0,
                  messages=[{"role": "user", "content": "Count to five."}])
    full = client.chat.completions.create(**kwargs)
    stream = client.chat.completions.create(stream=True, **kwargs)
    parts, roles = [], []
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        assert chunk.usage is None
        for ch in chunk.choices:
            if ch.delta.role:
                roles.append(ch.delta.role)
            parts.append(ch.delta.content or "")
    assert roles == ["assistant"]
    assert "".join(parts) == full.choices[0].message.content


def test_n_greater_than_one(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Once upon a time", n=3, max_tokens=6,
                                  temperature=1.0, seed=7)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    assert r.usage.completion_tokens == sum(1 for _ in range(3)) * 6 or r.usage.completion_tokens <= 18


def test_n_streaming(client):
    stream = client.chat.completions.create(
        model=MODEL_NAME, n=2, max_tokens=5, temperature=0.8, seed=3, stream=True,
        messages=[{"role": "user", "content": "Name a color."}])
    finished = set()
    for chunk in stream:
        for ch in chunk.choices:
            if ch.finish_reason:
                finished.add(ch.index)
    assert finished == {0, 1}


def test_prompt_list(client):
    r = client.completions.create(model=MODEL_NAME, prompt=["1, 2, 3,", "a, b, c,"], max_tokens=3,
                                  temperature=0, n=2)
    assert sorted(c.index for c in r.choices) == [0, 1, 2, 3]
    # greedy: both samples of one prompt agree
    assert r.choices[0].text == r.choices[1].text
    assert r.choices[2].text == r.choices[3].text


def test_token_id_prompt(client):
    r = client.completions.create(model=MODEL_NAME, prompt=[785, 6722, 315], max_tokens=3,
                                  temperature=0)
    assert r.usage.prompt_tokens == 3


def test_stop(client):
    base = client.completions.create(model=MODEL_NAME, prompt="1, 2, 3, 4,", max_tokens=12,
                                     temperature=0)
    text = base.choices[0].text
    assert len(text) > 3
    stop = text[2:4]
    r = client.completions.create(model=MODEL_NAME, prompt="1, 2, 3, 4,", max_tokens=12,
                                  temperature=0, stop=[stop])
    assert r.choices[0].finish_reason == "stop"
    assert stop not in r.choices[0].text
    assert text.startswith(r.choices[0].text)


def test_seed_reproducible(client):
    kwargs = dict(model=MODEL_NAME, prompt="Write a word:", max_tokens=12, temperature=1.0,
                  top_p=0.95, seed=1234)
    a = client.completions.create(**kwargs).choices[0].text
    b = client.completions.create(**kwargs).choices[0].text
    assert a == b


def test_completion_logprobs(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=4, temperature=0,
                                  logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    assert all(x <= 0 for x in lp.token_logprobs)
    assert all(1 <= len(t) <= 2 for t in lp.top_logprobs)
    # greedy: the chosen token is the best alternative
    for tok, lpv, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert max(top.values()) == pytest.approx(lpv, abs=1e-4)


def test_chat_logprobs(client):
    r = client.chat.completions.create(
        model=MODEL_NAME, max_tokens=4, temperature=0, logprobs=True, top_logprobs=3,
        messages=[{"role": "user", "content": "Hi"}])
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == 3
        assert bytes(entry.bytes).decode("utf-8", errors="replace")


def test_echo(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Echo me", max_tokens=2, temperature=0,
                                  echo=True)
    assert r.choices[0].text.startswith("Echo me")


def test_extra_fields(client):
    r = client.completions.create(
        model=MODEL_NAME, prompt="x", max_tokens=3, temperature=0.5, presence_penalty=0.5,
        frequency_penalty=0.5, logit_bias={"15": 1}, user="u",
        extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "min_tokens": 3,
                    "ignore_eos": True, "priority": 1, "unknown_field": [1, 2]})
    assert r.usage.completion_tokens == 3


def test_bad_request_raises(client):
    import openai
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt="x", max_tokens=-1)
    assert e.value.body["param"] == "max_tokens"
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="x", max_tokens=1)
