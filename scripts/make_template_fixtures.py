#!/usr/bin/env python3
"""Golden data for loom's chat-template interpreter (src/tokenizer/jinja/).

Renders the chat templates in tests/fixtures/jinja/templates/*.jinja against
many conversations, and a set of small language-feature snippets, with the
reference implementation: transformers' own compiled jinja2 environment
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
its tojson / raise_exception / strftime_now / namespace / dict). Writes

  tests/fixtures/jinja/chat_cases.json      {template name, context, expected | error}
  tests/fixtures/jinja/language_cases.json  {source, context, expected | error}

strftime_now() is pinned to FIXED_NOW (UTC) so outputs are reproducible; the
C++ test passes the same instant through RenderOptions::now_unix_seconds.

Usage: pip install jinja2 transformers; python3 scripts/make_template_fixtures.py
"""

import copy
import json
import pathlib
from datetime import datetime, timezone

import jinja2
from transformers.utils.chat_template_utils import _compile_jinja_template

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "jinja"
FIXED_NOW = 1721995200  # 2024-07-26 12:00:00 UTC


def fixed_strftime_now(fmt):
    return datetime.fromtimestamp(FIXED_NOW, timezone.utc).strftime(fmt)


def compile_template(source):
    template = _compile_jinja_template(source)
    template.globals["strftime_now"] = fixed_strftime_now
    return template


def render(source, context):
    """Returns {"expected": text} or {"error": message, "error_type": name[, "error_line": n]}."""
    try:
        template = compile_template(source)
    except jinja2.TemplateSyntaxError as e:
        return {"error": e.message, "error_type": "TemplateSyntaxError", "error_line": e.lineno}
    except SyntaxError as e:  # jinja2 lets Python reject e.g. a top-level {% break %}
        return {"error": str(e), "error_type": "SyntaxError"}
    try:
        return {"expected": template.render(**copy.deepcopy(context))}
    except jinja2.TemplateError as e:
        return {"error": str(e), "error_type": type(e).__name__}
    except Exception as e:  # TypeError, ValueError... from Python operations
        return {"error": str(e), "error_type": type(e).__name__}


# ---------------------------------------------------------------- chat cases

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a given location",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "City name, e.g. Paris"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["location"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web for a query — returns snippets",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "max_results": {"type": "integer", "default": 5, "minimum": 1.5},
                },
                "required": ["query"],
            },
            "return": {"type": "array", "items": {"type": "string"}},
        },
    },
]

CALL = {
    "id": "call12345",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}},
}
CALL2 = {
    "id": "call67890",
    "type": "function",
    "function": {"name": "search", "arguments": {"query": "weather \"Paris\"", "max_results": 3}},
}
CALL_STR = {
    "id": "callabcde",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"location": "Tokyo"}'},
}

SYS = {"role": "system", "content": "You are a helpful assistant."}


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


MESSAGE_SETS = {
    "user_only": [user("Hello!")],
    "system_user": [SYS, user("What is 2+2?")],
    "multi_turn": [SYS, user("Hi"), assistant("Hello! How can I help?"), user("Tell me a joke.")],
    "multi_turn_no_system": [user("Hi"), assistant("Hello!"), user("Bye")],
    "ends_with_assistant": [user("Hi"), assistant("Hello there.")],
    "unicode": [user("¿Qué tal? 你好 🚀 café"), assistant("Ça va! 👍 Ünïcödé"), user("Ещё раз")],
    "whitespace": [SYS, user("  spaced out  \n\n"), assistant("\n reply with\ttabs \n"), user("\tend")],
    "empty_content": [user(""), assistant(""), user("")],
    "quotes_and_tags": [user('He said "hi" {{ not a tag }} {% nor this %} \\n \'single\'')],
    "list_content": [
        {"role": "user", "content": [{"type": "text", "text": "Describe"}, {"type": "text", "text": "this."}]},
    ],
    "list_content_image": [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " What is this? "}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
    ],
    "bad_order_user_user": [user("one"), user("two")],
    "starts_with_assistant": [assistant("I speak first"), user("ok")],
    "system_only": [SYS],
    "empty": [],
    "two_systems": [SYS, user("a"), {"role": "system", "content": "Second system"}, user("b")],
    "tool_call": [
        SYS,
        user("What's the weather in Paris?"),
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": '{"temperature": 22}'},
        assistant("It is 22°C in Paris."),
    ],
    "tool_call_no_content": [
        user("Weather in Paris?"),
        {"role": "assistant", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call12345", "content": "22"},
    ],
    "parallel_tool_calls": [
        user("Weather and news for Paris?"),
        {"role": "assistant", "content": "Let me check.", "tool_calls": [CALL, CALL2]},
        {"role": "tool", "tool_call_id": "call12345", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call67890", "content": "no news"},
        assistant("Sunny, and no news."),
        user("Thanks"),
    ],
    "tool_call_string_args": [
        user("Weather in Tokyo?"),
        {"role": "assistant", "content": None, "tool_calls": [CALL_STR]},
        {"role": "tool", "tool_call_id": "callabcde", "content": "rain"},
    ],
    "tool_result_mapping": [
        user("Weather?"),
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call12345", "content": {"temperature": 22, "sky": "clear"}},
    ],
    "reasoning_field": [
        user("What is 3*7?"),
        {"role": "assistant", "content": "21", "reasoning_content": "\n3 times 7 is 21.\n"},
        user("And 3*8?"),
    ],
    "reasoning_inline": [
        user("Think first."),
        {"role": "assistant", "content": "<think>\nLet me think.\n</think>\n\nDone."},
    ],
    "reasoning_last_assistant": [
        user("Q1"),
        {"role": "assistant", "content": "A1", "reasoning_content": "R1"},
        user("Q2"),
        {"role": "assistant", "content": "<think>R2</think>A2"},
    ],
    "long": [SYS] + [m for i in range(8) for m in (user(f"question {i}"), assistant(f"answer {i}"))],
    "deepseek_think": [user("Hi"), assistant("<think>hmm</think>Hello!"), user("Bye")],
}

# Which message sets and extra context each template is rendered with.
TEMPLATES = {
    "llama3": {"bos": "<|begin_of_text|>", "eos": "<|eot_id|>"},
    "llama3_1": {"bos": "<|begin_of_text|>", "eos": "<|eot_id|>", "tools": True,
                 "extra": [{}, {"date_string": "01 Jan 2025"}, {"tools_in_user_message": False},
                           {"builtin_tools": ["brave_search", "wolfram_alpha"]}]},
    "llama3_2": {"bos": "<|begin_of_text|>", "eos": "<|eot_id|>", "tools": True,
                 "extra": [{}, {"date_string": "01 Jan 2025"}, {"tools_in_user_message": False}]},
    "qwen2_5": {"bos": "", "eos": "<|im_end|>", "tools": True},
    "qwen3": {"bos": "", "eos": "<|im_end|>", "tools": True,
              "extra": [{}, {"enable_thinking": False}, {"enable_thinking": True}]},
    "gemma3": {"bos": "<bos>", "eos": "<eos>"},
    "mistral_v01": {"bos": "<s>", "eos": "</s>"},
    "mistral_v03": {"bos": "<s>", "eos": "</s>", "tools": True},
    "mistral_nemo_tekken": {"bos": "<s>", "eos": "</s>", "tools": True},
    "mistral_v7_tekken": {"bos": "<s>", "eos": "</s>"},
    "llama2": {"bos": "<s>", "eos": "</s>"},
    "chatml": {"bos": "", "eos": "<|im_end|>"},
    "smollm2": {"bos": "", "eos": "<|im_end|>"},
    "phi3": {"bos": "<s>", "eos": "<|endoftext|>"},
    "deepseek_v3": {"bos": "<｜begin▁of▁sentence｜>", "eos": "<｜end▁of▁sentence｜>"},
    "chatml_generation": {"bos": "", "eos": "<|im_end|>"},
}

TOOL_SETS = {"tool_call", "tool_call_no_content", "parallel_tool_calls", "tool_call_string_args",
             "tool_result_mapping", "system_user", "user_only", "multi_turn", "empty"}


def chat_cases():
    cases = []
    for name, spec in TEMPLATES.items():
        source = (FIXTURES / "templates" / f"{name}.jinja").read_text()
        for set_name, messages in MESSAGE_SETS.items():
            for add_gen in (False, True):
                tool_options = [None]
                if spec.get("tools") and set_name in TOOL_SETS:
                    tool_options.append(TOOLS)
                for tools in tool_options:
                    for extra in spec.get("extra", [{}]):
                        if extra and (add_gen or tools is None) and set_name not in TOOL_SETS:
                            continue
                        context = {
                            "messages": messages,
                            "tools": tools,
                            "documents": None,
                            "add_generation_prompt": add_gen,
                            "bos_token": spec["bos"],
                            "eos_token": spec["eos"],
                            **extra,
                        }
                        label = f"{name}/{set_name}/gen={int(add_gen)}/tools={int(tools is not None)}"
                        if extra:
                            label += "/" + ",".join(f"{k}={v}" for k, v in extra.items())
                        case = {"name": label, "template": name, "context": context, "now": FIXED_NOW}
                        case.update(render(source, context))
                        cases.append(case)
    return cases


# ------------------------------------------------------------ language cases

DATA = {
    "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
    "d": {"b": 2, "a": 1, "c": {"x": [1, 2, 3]}},
    "items": [3, 1, 2],
    "words": ["banana", "Apple", "cherry", "apple"],
    "people": [{"name": "Ann", "age": 31, "admin": True}, {"name": "bob", "age": 25, "admin": False},
               {"name": "Cy", "age": 40}],
    "s": "Hello, World",
    "n": 7,
    "f": 2.5,
    "t": True,
    "nothing": None,
    "empty": "",
    "nested": {"a": {"b": {"c": "deep"}}},
    "uni": "héllo wörld ß 你好",
}

LANGUAGE = [
    # output and literals
    ("text", "plain text", {}),
    ("expr_int", "{{ 1 + 2 * 3 }}", {}),
    ("expr_float", "{{ 1.0 }} {{ 2.50 }} {{ 1e3 }} {{ 1.5e-7 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 123456789.0 * 1000 }}", {}),
    ("expr_div", "{{ 7 / 2 }} {{ 8 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7.5 // 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 0.5 }}", {}),
    ("expr_neg", "{{ -n }} {{ -f }} {{ +n }} {{ - 3 + 1 }} {{ -2 ** 2 }}", DATA),
    ("expr_concat", "{{ 'a' ~ 1 ~ none ~ true ~ [1] }}", {}),
    ("expr_concat_undefined", "[{{ 'a' ~ missing ~ 'b' }}]", {}),
    ("str_mul", "{{ 'ab' * 3 }}|{{ 3 * 'x' }}|{{ 'a' * 0 }}|{{ 'a' * -1 }}|{{ [1, 2] * 2 }}", {}),
    ("str_add", "{{ 'a' + 'b' }} {{ [1] + [2, 3] }} {{ (1,) + (2,) }}", {}),
    ("bools", "{{ true }} {{ false }} {{ True }} {{ none }} {{ None }} {{ nothing }}", DATA),
    ("print_list", "{{ [1, 'a', none, true, 1.5, {'k': (1, 2)}, \"it's\", 'say \"x\"', 'a\\nb'] }}", {}),
    ("print_dict", "{{ d }} {{ {} }} {{ [] }} {{ () }} {{ (1,) }} {{ {'a': none} }}", DATA),
    ("print_tuple_expr", "{{ 1, 2 }}", {}),
    ("string_escapes", "{{ 'tab\\there' }}|{{ \"q\\\"q\" }}|{{ 'u\\u00e9' }}|{{ 'x\\x41' }}|{{ 'back\\\\slash' }}|{{ 'a\\qb' }}", {}),
    ("adjacent_strings", "{{ 'a' 'b' \"c\" }}", {}),
    ("number_underscore", "{{ 1_000 + 1 }}", {}),
    ("unicode_str", "{{ uni }} {{ uni|length }} {{ uni|upper }} {{ uni[1] }} {{ uni[-2:] }} {{ uni|reverse }}", DATA),
    ("repr_unicode", "{{ [uni, '\\x00\\x7f\\u00a0\\u2028'] }}", DATA),
    # comparisons and logic
    ("compare", "{{ 1 < 2 }} {{ 2 <= 2 }} {{ 3 > 4 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'abc' < 'abd' }} {{ [1, 2] < [1, 3] }}", {}),
    ("compare_eq_types", "{{ 1 == true }} {{ 0 == false }} {{ [1] == [1] }} {{ {'a': 1} == {'a': 1} }} {{ none == none }} {{ 'a' == 1 }} {{ missing == missing2 }}", {}),
    ("in_ops", "{{ 'a' in 'cat' }} {{ 2 in items }} {{ 'b' in d }} {{ 'z' not in d }} {{ 5 not in items }} {{ 'x' in missing }}", DATA),
    ("and_or", "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ none or [] }} {{ '' and 1 }} {{ not 0 }} {{ not 'a' }} {{ not not 1 }}", {}),
    ("condexpr", "{{ 'y' if t else 'n' }} {{ 'y' if nothing else 'n' }} [{{ 'y' if nothing }}] {{ 1 if 0 else 2 if 0 else 3 }}", DATA),
    ("precedence_concat_binds_tighter", "{{ 1 + 2 ~ 3 }}", {}),
    ("precedence", "{{ (1 + 2) ~ 3 }} {{ not 1 == 2 }} {{ 2 * 3 ** 2 }} {{ -1 ~ 'x' }} {{ 10 - 2 - 3 }} {{ 2 ** 3 ** 2 }}", {}),
    # attribute / subscript
    ("attr_dict", "{{ d.a }} {{ d['b'] }} {{ d.c.x[1] }} {{ d.c['x'][-1] }} {{ nested.a.b.c }} [{{ d.missing }}] [{{ d['missing'] }}]", DATA),
    ("attr_int", "{{ items.0 }} {{ msgs.1.content }}", DATA),
    ("subscript_oob", "[{{ items[10] }}] [{{ items[-10] }}]", DATA),
    ("slices", "{{ items[::-1] }} {{ items[1:] }} {{ items[:-1] }} {{ items[::2] }} {{ s[:5] }} {{ s[::-1] }} {{ s[7:100] }} {{ items[5:] }} {{ items[-2::-1] }}", DATA),
    ("undefined_attr_error", "{{ missing.attr }}", {}),
    ("undefined_item_error", "{{ missing[0] }}", {}),
    ("none_attr", "[{{ nothing.foo }}]", DATA),
    ("missing_nested_error", "{{ d.missing.deeper }}", DATA),
    ("empty_list_index_error", "{{ msgs[5]['role'] }}", DATA),
    ("dunder_refused", "{{ s.__class__ }}", DATA),
    ("dict_method_shadows_key", "{{ d.items()|list }}", {"d": {"items": 1}}),
    ("dict_items_key_subscript", "{{ d['items'] }}", {"d": {"items": 1}}),
    # if / for
    ("if_elif", "{% for i in [1, 2, 3, 4] %}{% if i == 1 %}one{% elif i == 2 %}two{% elif i is even %}even{% else %}other{% endif %};{% endfor %}", {}),
    ("for_loop_vars", "{% for x in items %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }};{% endfor %}", DATA),
    ("for_prev_next", "{% for x in items %}[{{ loop.previtem }}|{{ loop.nextitem }}]{% endfor %}", DATA),
    ("for_cycle", "{% for x in items %}{{ loop.cycle('odd', 'even') }} {% endfor %}", DATA),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in items if x > 5 %}x{% else %}none big{% endfor %}", DATA),
    ("for_filter", "{% for x in items if x != 1 %}{{ x }}:{{ loop.index }}:{{ loop.length }} {% endfor %}", DATA),
    ("for_dict", "{% for k in d %}{{ k }},{% endfor %}|{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k, v in d|dictsort %}{{ k }}{% endfor %}", DATA),
    ("for_string", "{% for c in 'héy' %}[{{ c }}]{% endfor %}", {}),
    ("for_undefined", "{% for x in missing %}x{% else %}no{% endfor %}", {}),
    ("for_none_error", "{% for x in nothing %}x{% endfor %}", DATA),
    ("for_unpack", "{% for a, b in [(1, 2), [3, 4]] %}{{ a + b }} {% endfor %}", {}),
    ("for_unpack_error", "{% for a, b in [(1, 2, 3)] %}{{ a }}{% endfor %}", {}),
    ("for_scope", "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = i * 10 %}{{ x }};{% endfor %}{{ x }}", {}),
    ("for_nested_loop", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("loop_last_sep", "{% for m in msgs %}{{ m.role }}{% if not loop.last %}, {% endif %}{% endfor %}", DATA),
    # set, namespace
    ("set_basic", "{% set a = 1 %}{% set b, c = 2, 3 %}{{ a + b + c }}", {}),
    ("set_block", "{% set x %}Hello {{ 'World' }}{% endset %}[{{ x }}]", {}),
    ("set_block_filter", "{% set x | upper | trim %}  abc  {% endset %}[{{ x }}]", {}),
    ("namespace", "{% set ns = namespace(count=0, found=false) %}{% for i in items %}{% set ns.count = ns.count + i %}{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.count }} {{ ns.found }}", DATA),
    ("namespace_empty", "{% set ns = namespace() %}{% set ns.x = 5 %}{{ ns.x }} [{{ ns.y }}]", {}),
    ("namespace_from_dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}", {}),
    ("namespace_underscore_error", "{% set ns = namespace(_x=1) %}", {}),
    ("set_attr_non_namespace_error", "{% set d.x = 1 %}", DATA),
    ("set_in_if_leaks", "{% if true %}{% set y = 5 %}{% endif %}{{ y }}", {}),
    ("context_override", "{% set messages = messages[1:] %}{{ messages|length }}", {"messages": [1, 2, 3]}),
    # macros
    ("macro_basic", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', '?') }} {{ greet(punct='.', name='Cy') }}", {}),
    ("macro_recursive", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}", {}),
    ("macro_globals", "{% macro m() %}{{ top }}-{{ ctx }}{% endmacro %}{% set top = 'T' %}{{ m() }}", {"ctx": "C"}),
    ("macro_varargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}", {}),
    ("macro_missing_arg", "{% macro m(a, b) %}[{{ a }}][{{ b }}]{% endmacro %}{{ m(1) }}", {}),
    ("macro_caller", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}inner {{ 1 + 1 }}{% endcall %}", {}),
    ("macro_caller_args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(item) each([1, 2]) %}<{{ item }}>{% endcall %}", {}),
    ("macro_default_uses_arg", "{% macro m(a, b=a * 2) %}{{ a }},{{ b }}{% endmacro %}{{ m(3) }}", {}),
    ("macro_output_is_string", "{% macro m() %}42{% endmacro %}{{ m() ~ '!' }} {{ m()|length }}", {}),
    # filters
    ("filter_block", "{% filter upper %}shout {{ 'this' }}{% endfilter %}", {}),
    ("f_trim_case", "[{{ '  x  '|trim }}] {{ 'abc'|upper }} {{ 'ABC'|lower }} {{ 'hello world'|capitalize }} {{ 'hello wORLD-foo bar'|title }} [{{ 'xxhixx'|trim('x') }}]", {}),
    ("f_length", "{{ items|length }} {{ 'héllo'|length }} {{ d|count }} {{ missing|length }}", DATA),
    ("f_first_last", "{{ items|first }} {{ items|last }} {{ 'abc'|first }} [{{ []|first }}]", DATA),
    ("f_join", "{{ items|join(', ') }} {{ items|join }} {{ people|join('/', attribute='name') }}", DATA),
    ("f_default", "{{ missing|default('dflt') }} [{{ missing|default }}] {{ ''|default('e') }} {{ ''|default('e', true) }} {{ nothing|default('n') }} {{ nothing|d('n', boolean=true) }} {{ 0|d(5, true) }}", DATA),
    ("f_replace", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ s|replace(', ', '|') }}", DATA),
    ("f_list_string", "{{ 'abc'|list }} {{ items|string }} {{ 5|string ~ 'x' }} {{ (1, 2)|list }} {{ d|list }}", DATA),
    ("f_int_float", "{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '3.5'|float }} {{ 'x'|float }} {{ 2|float }} {{ '0x1A'|int(0, 16) }} {{ true|int }}", {}),
    ("f_abs_round", "{{ -3|abs }} {{ (-2.5)|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(method='floor') }} {{ 7|round }} {{ 1234.5678|round(-2) }}", {}),
    ("f_tojson", "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ 'é\"\\n'|tojson }}|{{ [1, 2.5, none, true]|tojson }}|{{ {}|tojson(indent=2) }}|{{ []|tojson }}", DATA),
    ("f_tojson_options", "{{ d|tojson(sort_keys=true) }}|{{ 'é'|tojson(ensure_ascii=true) }}|{{ d|tojson(separators=(',', ':')) }}|{{ [[], {}, [1]]|tojson(indent=1) }}|{{ {'a': 1}|tojson(indent='\\t') }}", DATA),
    ("f_tojson_floats", "{{ [1.0, 0.1, 1e20, 1e-7, 3.14159, -0.0, 100.0]|tojson }}", {}),
    ("f_tojson_undefined_error", "{{ missing|tojson }}", {}),
    ("f_items_keys_values", "{{ d|items|list }} {{ d.keys()|list }} {{ d.values()|list }} {{ missing|items|list }}", DATA),
    ("f_dictsort", "{{ d|dictsort }} {{ {'b': 1, 'A': 2, 'a': 3}|dictsort }} {{ {'b': 1, 'A': 2}|dictsort(true) }} {{ {'x': 2, 'y': 1}|dictsort(by='value') }} {{ {'x': 2, 'y': 1}|dictsort(reverse=true) }}", DATA),
    ("f_select", "{{ items|select('odd')|list }} {{ items|reject('odd')|list }} {{ [0, 1, '', 'a', none]|select|list }} {{ items|select('>', 1)|list }} {{ items|select('equalto', 2)|list }}", DATA),
    ("f_selectattr", "{{ people|selectattr('admin')|map(attribute='name')|list }} {{ people|rejectattr('admin')|map(attribute='name')|list }} {{ people|selectattr('age', 'gt', 30)|map(attribute='name')|join(',') }} {{ msgs|selectattr('role', 'equalto', 'user')|list|length }} {{ people|selectattr('admin', 'defined')|list|length }}", DATA),
    ("f_map", "{{ words|map('upper')|list }} {{ people|map(attribute='name')|join(',') }} {{ people|map(attribute='admin', default='?')|list }} {{ items|map('string')|join('-') }} {{ words|map('replace', 'a', '4')|list }}", DATA),
    ("f_unique_sort", "{{ words|unique|list }} {{ words|unique(case_sensitive=true)|list }} {{ words|sort }} {{ words|sort(case_sensitive=true) }} {{ items|sort(reverse=true) }} {{ people|sort(attribute='age')|map(attribute='name')|list }} {{ people|sort(attribute='name')|map(attribute='name')|list }}", DATA),
    ("f_reverse", "{{ items|reverse|list }} {{ 'abc'|reverse }}", DATA),
    ("f_min_max_sum", "{{ items|min }} {{ items|max }} {{ items|sum }} {{ words|min }} {{ words|max }} {{ people|sum(attribute='age') }} {{ people|max(attribute='age') }} {{ [1.5, 2]|sum(start=10) }} [{{ []|max }}]", DATA),
    ("f_batch", "{{ items|batch(2)|list }} {{ items|batch(2, 'x')|list }}", DATA),
    ("f_indent", "[{{ 'a\\nb\\n\\nc'|indent }}] [{{ 'a\\nb'|indent(2, true) }}] [{{ 'a\\n\\nb'|indent(2, blank=true) }}] [{{ 'x\\ny'|indent('> ') }}]", {}),
    ("f_misc", "{{ 'one two  three'|wordcount }} {{ '<a href=\"x\">&</a>'|e }} {{ '<b>'|escape }} {{ '<b>'|safe }} [{{ 'hi'|center(8) }}] [{{ 'hi'|center(7) }}] {{ 'The quick brown fox jumps'|truncate(12) }} {{ 'The quick brown fox'|truncate(9, true) }}", {}),
    ("f_format", "{{ '%s-%d'|format('a', 5) }} {{ '%.2f'|format(3.14159) }} {{ '%5s|%-5s|'|format('ab', 'cd') }} {{ 'x=%(x)s'|format(x=1) }} {{ '%s' % 'm' }} {{ '%d%%' % 50 }} {{ '%s and %s' % (1, 2) }}", {}),
    ("f_attr", "[{{ people[0]|attr('name') }}] {{ 'ab'|attr('upper') is callable }}", DATA),
    ("f_unknown_error", "{{ 1|nosuchfilter }}", {}),
    ("f_unknown_unexecuted_error", "line1\n{% if false %}{{ 1|nosuchfilter }}{% endif %}", {}),
    ("test_unknown_unexecuted_error", "{% if false %}\n{{ 1 is nosuchtest }}{% endif %}", {}),
    ("f_length_int_error", "{{ 5|length }}", {}),
    # tests
    ("tests_types", "{{ 1 is number }} {{ 1.0 is float }} {{ 1 is integer }} {{ true is integer }} {{ true is boolean }} {{ 'a' is string }} {{ d is mapping }} {{ items is mapping }} {{ items is iterable }} {{ 'x' is iterable }} {{ 5 is iterable }} {{ items is sequence }} {{ nothing is none }} {{ true is true }} {{ 1 is true }} {{ false is false }}", DATA),
    ("tests_defined", "{{ missing is defined }} {{ missing is undefined }} {{ d is defined }} {{ d.zz is defined }} {{ nothing is defined }} {{ missing is not defined }}", DATA),
    ("tests_numbers", "{{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ 2 is eq 2 }} {{ 2 is equalto(3) }} {{ 3 is gt 2 }} {{ 3 is lt(2) }} {{ 3 is ge 3 }} {{ 3 is ne 3 }}", {}),
    ("tests_misc", "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'aB' is lower }} {{ range is callable }} {{ d is callable }} {{ 2 is in [1, 2] }} {{ none is sameas none }} {{ true is sameas true }} {{ 'x' is not string }}", DATA),
    ("test_unknown_error", "{{ 1 is nosuchtest }}", {}),
    # methods
    ("str_methods", "{{ s.upper() }} {{ s.lower() }} {{ '  x '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a'.lstrip() }}|{{ 'b  '.rstrip() }}|{{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }}", DATA),
    ("str_split", "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ 'l1\\nl2\\r\\nl3'.splitlines() }}", {}),
    ("str_starts_ends", "{{ s.startswith('Hell') }} {{ s.endswith('x') }} {{ s.startswith(('x', 'H')) }} {{ s.endswith(('ld', 'zz')) }}", DATA),
    ("str_find_count_replace", "{{ s.find('o') }} {{ s.rfind('o') }} {{ s.find('z') }} {{ s.count('l') }} {{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 1) }} {{ 'héllo'.find('l') }}", DATA),
    ("str_format_method", "{{ '{} + {} = {}'.format(1, 2, 3) }} {{ '{0}{1}{0}'.format('a', 'b') }} {{ '{name}!'.format(name='x') }} {{ '{{}}'.format() }}", {}),
    ("str_join_method", "{{ ', '.join(['a', 'b']) }} {{ '-'.join('abc') }}", {}),
    ("str_is_methods", "{{ '123'.isdigit() }} {{ 'ab'.isalpha() }} {{ 'a1'.isalnum() }} {{ '  '.isspace() }} {{ 'AB'.isupper() }} {{ 'ab'.islower() }} {{ ''.isdigit() }}", {}),
    ("dict_methods", "{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }} {{ d.keys()|list }} {{ d.items()|list }}", DATA),
    ("list_methods", "{{ items.index(2) }} {{ [1, 1, 2].count(1) }}", DATA),
    ("list_append_refused", "{% set l = [] %}{{ l.append(1) }}", {}),
    ("dict_update_refused", "{{ d.update({'x': 1}) }}", DATA),
    # globals
    ("range", "{{ range(3)|list }} {{ range(1, 4)|list }} {{ range(10, 0, -3)|list }} {{ range(0)|list }} {{ range(5)|length }}", {}),
    ("dict_global", "{{ dict(a=1, b=2) }} {{ dict([('x', 1)]) }} {{ dict({'k': 'v'}, z=0) }}", {}),
    ("raise_exception", "{{ raise_exception('custom failure: ' ~ 42) }}", {}),
    ("raise_in_loop", "{% for m in msgs %}{% if m.role == 'assistant' %}{{ raise_exception('no assistants') }}{% endif %}{{ m.content }}{% endfor %}", DATA),
    ("strftime_now", "{{ strftime_now('%Y-%m-%d %H:%M') }} {{ strftime_now('%d %b %Y') }} {{ strftime_now('%A %B') }}", {}),
    # whitespace control
    ("ws_trim_blocks", "{% if true %}\nline\n{% endif %}\nafter", {}),
    ("ws_lstrip_blocks", "a\n    {% if true %}\n    b\n    {% endif %}\nc", {}),
    ("ws_minus", "a  \n  {%- if true -%}  \n  b  \n  {%- endif -%}  \n  c", {}),
    ("ws_var_minus", "a  {{- 'x' -}}  b {{ 'y' }} c", {}),
    ("ws_plus", "a\n    {%+ if true %}x{% endif %}\n  {% if true +%}\ny{% endif %}", {}),
    ("ws_comment", "a\n  {# comment #}\nb {#- c -#} c\n{# multi\nline #}\nd", {}),
    ("ws_var_not_lstripped", "a\n    {{ 'v' }}\nb", {}),
    ("ws_trailing_newline", "line\n", {}),
    ("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\r\n", {}),
    ("ws_mixed_tags_line", "x {% if true %} y {% endif %} z\n  {% for i in [1] %}{{ i }}\n  {% endfor %}", {}),
    ("ws_indented_template", "{%- for m in msgs %}\n    {%- if m.role == 'user' %}\n        {{- 'U:' + m.content }}\n    {%- else %}\n        {{- 'A:' + m.content }}\n    {%- endif %}\n{%- endfor %}\n", DATA),
    ("raw_block", "{% raw %}{{ not rendered }} {% if %}{% endraw %}|{%- raw -%}  x  {%- endraw -%}|", {}),
    ("generation_tag", "a{% generation %}b{{ 1 }}{% endgeneration %}c", {}),
    ("dict_literal_in_var", "{{ {'a': {'b': 1}} }}", {}),
    ("float_repr", "{{ [0.1, 1/3, 2/3, 1e22, 1e-300, 5e-324, 123456789012345678.0, 0.000123, 0.0001, 1e15 + 0.5, 1e300 * 1e10, -1e300 * 1e10, 2.0 ** 0.5 * 1e-5] }}", {}),
    ("star_args", "{% macro m(a, b, c) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(*[1, 2], **{'c': 3}) }} {{ dict(**{'k': 1}) }}", {}),
    ("selectattr_in", "{{ msgs|selectattr('role', 'in', ['user', 'system'])|map(attribute='content')|list }}", DATA),
    ("truthiness", "{% for v in [0, 0.0, '', [], {}, none, 1, 'a', [0], {'a': 0}, true, false] %}{{ 'T' if v else 'F' }}{% endfor %}", {}),
    ("string_compare_unicode", "{{ 'é' > 'z' }} {{ ['b', 'a', 'é', 'Z']|sort }}", {}),
    ("nested_namespace_loop", "{% set ns = namespace(out=[]) %}{% for m in msgs %}{% set ns.out = ns.out + [m.role[0]|upper] %}{% endfor %}{{ ns.out|join }}", DATA),
    ("tojson_nested_unicode", "{{ {'k': ['ü', {'x': 'a\tb\u0001'}], 'n': none}|tojson }} {{ {'k': 'ü'}|tojson(ensure_ascii=true, indent=2) }}", {}),
    ("int_keys", "{{ {1: 'a', 2: 'b'}[1] }} {{ {1: 'a'}|tojson }} {{ {1: 'a', 'x': 2} }}", {}),
    ("loop_in_macro_call", "{% macro row(x) %}<{{ x }}>{% endmacro %}{% for i in range(3) %}{{ row(i) }}{% if not loop.last %},{% endif %}{% endfor %}", {}),
    # errors: syntax
    ("syntax_unclosed_if", "{% if true %}\nyes\n", {}),
    ("syntax_unclosed_for", "line1\n{% for x in y %}\n{{ x }}", {}),
    ("syntax_bad_expr", "a\nb\n{{ 1 + }}", {}),
    ("syntax_unknown_tag", "x\n{% frobnicate %}", {}),
    ("syntax_stray_endif", "{% endif %}", {}),
    ("syntax_unclosed_var", "hello {{ name", {}),
    ("syntax_unclosed_string", "{{ 'abc }}", {}),
    ("syntax_bad_char", "{{ a $ b }}", {}),
    ("syntax_unclosed_comment", "{# never closed", {}),
    ("syntax_break_outside_loop", "{% break %}", {}),
    ("syntax_extends_unsupported", "{% extends 'base.html' %}", {}),
    ("syntax_unbalanced_paren", "{{ (1 + 2 }}", {}),
    ("syntax_elif_after_else", "{% if a %}{% else %}{% elif b %}{% endif %}", {}),
    ("syntax_missing_in", "{% for x y %}{% endfor %}", {}),
    ("syntax_chained_is", "{{ 1 is number is number }}", {}),
    # errors: runtime
    ("err_add_types", "{{ 'a' + 1 }}", {}),
    ("err_div_zero", "{{ 1 / 0 }}", {}),
    ("err_mod_zero", "{{ 1 % 0 }}", {}),
    ("err_undefined_arith", "{{ missing + 1 }}", {}),
    ("err_call_non_callable", "{{ d() }}", DATA),
    ("err_call_undefined", "{{ nosuchfunc() }}", {}),
    ("err_compare_types", "{{ 1 < 'a' }}", {}),
    ("err_in_int", "{{ 1 in 5 }}", {}),
    ("err_sort_mixed", "{{ [1, 'a']|sort }}", {}),
    ("err_str_in_list_join", "{{ ', '.join([1, 2]) }}", {}),
    ("err_unpack_set", "{% set a, b = [1] %}", {}),
    ("err_concat_list_str", "{{ [1] + 'a' }}", {}),
]


def language_cases():
    cases = []
    for name, source, context in LANGUAGE:
        case = {"name": name, "source": source, "context": context, "now": FIXED_NOW}
        case.update(render(source, context))
        cases.append(case)
    return cases


def main():
    chat = chat_cases()
    language = language_cases()
    for path, cases in (("chat_cases.json", chat), ("language_cases.json", language)):
        with open(FIXTURES / path, "w", encoding="utf-8") as f:
            json.dump({"generator": "scripts/make_template_fixtures.py", "jinja2": jinja2.__version__,
                       "cases": cases}, f, ensure_ascii=False, indent=1)
            f.write("\n")
    n_err = sum("error" in c for c in chat)
    print(f"chat cases: {len(chat)} ({n_err} expect errors); language cases: {len(language)} "
          f"({sum('error' in c for c in language)} expect errors)")


if __name__ == "__main__":
    main()
