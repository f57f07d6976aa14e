"""Jump-forward through the official openai client against `loom serve` on the
real default model: json_schema answers with long keys (and a forced tool
call) are valid, identical token for token to those of a server started with
--no-jump-forward (greedy and seeded sampling), and take fewer engine steps
(/metrics loom_engine_steps_total), the forced tokens counted as proposed and
accepted."""
import json
import time

import jsonschema
import pytest

from conftest import MODEL_NAME, Server

ORDER = {
    "type": "object",
    "properties": {
        "customer_full_name": {"type": "string", "maxLength": 40},
        "customer_shipping_address": {"type": "string", "maxLength": 80},
        "preferred_delivery_window": {"type": "string", "enum": ["morning", "afternoon", "evening"]},
        "number_of_items_ordered": {"type": "integer", "minimum": 1, "maximum": 99},
        "is_gift_wrapping_requested": {"type": "boolean"},
    },
    "required": ["customer_full_name", "customer_shipping_address", "preferred_delivery_window",
                 "number_of_items_ordered", "is_gift_wrapping_requested"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "order", "schema": ORDER, "strict": True}}
PROMPTS = ["Invent an online order for a customer in Paris, as JSON.",
           "Make up a gift order shipped to Lisbon, as JSON."]
SAMPLING = [{"temperature": 0.0}, {"temperature": 1.0, "seed": 7}, {"temperature": 0.8, "seed": 11}]
WEATHER = {"type": "function", "function": {
    "name": "get_current_weather_for_city",
    "parameters": {"type": "object",
                   "properties": {"city_name": {"type": "string", "maxLength": 40},
                                  "temperature_unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city_name", "temperature_unit"], "additionalProperties": False}}}


def run_all(extra_args):
    """Every request, one at a time, on a server of its own; the answers and
    the counters' growth over them."""
    openai = pytest.importorskip("openai")
    server = Server(*extra_args, "--max-grammar-compile-ms", "30000")
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600)
        before = server.metrics()
        answers = []
        for prompt in PROMPTS:
            for sampling in SAMPLING:
                r = client.chat.completions.create(
                    model=MODEL_NAME, messages=[{"role": "user", "content": prompt}],
                    response_format=FORMAT, max_tokens=250, **sampling)
                answers.append((r.choices[0].finish_reason, r.choices[0].message.content))
        r = client.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": "Weather in Oslo?"}],
            tools=[WEATHER], tool_choice="required", max_tokens=200, temperature=0)
        call = r.choices[0].message.tool_calls[0].function
        answers.append((r.choices[0].finish_reason, call.name + call.arguments))
        deadline = time.time() + 30  # the engine frees the last blocks after the answer
        while server.metrics()["loom_kv_cache_used_blocks"] != 0 and time.time() < deadline:
            time.sleep(0.2)
        after = server.metrics()
        assert after["loom_kv_cache_used_blocks"] == 0
        grew = {k: after.get(k, 0.0) - before.get(k, 0.0)
                for k in ("loom_engine_steps_total", "loom_jump_forward_tokens_total",
                          "loom_jump_forward_accepted_tokens_total", "loom_spec_decode_draft_tokens_total")}
        return answers, grew
    finally:
        server.stop()


def test_jump_forward_same_answers_fewer_steps():
    plain, plain_grew = run_all(["--no-jump-forward"])
    jumped, grew = run_all([])
    assert jumped == plain
    for finish, content in plain[:-1]:
        assert finish == "stop", content
        jsonschema.validate(json.loads(content), ORDER)
    assert plain[-1][0] == "tool_calls" and plain[-1][1].startswith("get_current_weather_for_city")
    print(f"steps {plain_grew['loom_engine_steps_total']:.0f} plain, "
          f"{grew['loom_engine_steps_total']:.0f} with jump-forward; forced tokens "
          f"{grew['loom_jump_forward_tokens_total']:.0f}, accepted {grew['loom_jump_forward_accepted_tokens_total']:.0f}")
    assert plain_grew["loom_jump_forward_tokens_total"] == 0
    assert plain_grew["loom_spec_decode_draft_tokens_total"] == 0
    assert grew["loom_jump_forward_accepted_tokens_total"] > 0
    assert grew["loom_jump_forward_accepted_tokens_total"] <= grew["loom_jump_forward_tokens_total"]
    assert grew["loom_engine_steps_total"] < plain_grew["loom_engine_steps_total"]
