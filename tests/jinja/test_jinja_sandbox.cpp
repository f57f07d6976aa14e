// The sandbox and the budgets: hostile templates end with loom::Error, quickly
// and without large allocations; malformed templates are syntax errors with a
// line number, never a crash; data outside the context cannot be reached.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/jinja/chat_template.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace loom {
namespace {

using json = nlohmann::json;

std::string render(const std::string& src, const json& ctx = json::object(), TemplateLimits limits = {}) {
  return ChatTemplate(src, limits).render(ctx);
}

#if defined(__SANITIZE_ADDRESS__) || !defined(NDEBUG)
constexpr double kMaxSeconds = 120;  // sanitizers and -O0 are 10-50x slower
#else
constexpr double kMaxSeconds = 5;
#endif

// Expects loom::Error whose message contains `needle`, within kMaxSeconds.
void expect_error(const std::string& src, const std::string& needle, TemplateLimits limits = {},
                  const json& ctx = json::object()) {
  auto start = std::chrono::steady_clock::now();
  try {
    std::string out = render(src, ctx, limits);
    ADD_FAILURE() << "no error for: " << src.substr(0, 200) << "\n  output size " << out.size();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message: " << e.what() << "\n  template: " << src.substr(0, 200);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(secs, kMaxSeconds) << "took " << secs << "s: " << src.substr(0, 200);
}

TEST(JinjaSandbox, HugeRangeIsRefusedBeforeMaterialising) {
  expect_error("{% for i in range(10**9) %}x{% endfor %}", "range()");
  expect_error("{{ range(10**18)|length }}", "range()");
  expect_error("{{ range(0 - 10**18, 10**18, 1)|list }}", "range()");
}

TEST(JinjaSandbox, HugeRepetitionIsRefused) {
  expect_error("{{ 'a' * 10**12 }}", "too large");
  expect_error("{{ 'ab' * 9223372036854775807 }}", "too large");
  expect_error("{{ [1, 2] * 10**9 }}", "too large");
  expect_error("{{ 10**12 * 'a' }}", "too large");
}

TEST(JinjaSandbox, DoublingStringHitsTheSizeLimit) {
  expect_error(
      "{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}{{ ns.s|length }}",
      "too large");
  expect_error(
      "{% set ns = namespace(s='xy') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}"
      "{% endfor %}",
      "too large");
  // Lists are charged per item, so the budget or the size cap stops this.
  expect_error("{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
               "");
}

TEST(JinjaSandbox, StepBudgetStopsLongLoops) {
  expect_error("{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}",
               "instruction budget");
  TemplateLimits small;
  small.max_steps = 1000;
  expect_error("{% for i in range(10000) %}{{ i }}{% endfor %}", "", small);
  // Slow string building is charged per byte, so it also stops.
  expect_error(
      "{% set ns = namespace(s='') %}{% for i in range(1000000) %}{% set ns.s = ns.s ~ 'xxxxxxxxxxxxxxxx' %}"
      "{% endfor %}",
      "");
}

TEST(JinjaSandbox, OutputLimit) {
  expect_error("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "output exceeds");
  TemplateLimits small;
  small.max_output_bytes = 100;
  expect_error("{% for i in range(20) %}0123456789{% endfor %}", "output exceeds", small);
  EXPECT_EQ(render("{% for i in range(10) %}0123456789{% endfor %}", json::object(), small).size(), 100u);
}

TEST(JinjaSandbox, FiltersRefuseHugeResults) {
  expect_error("{{ 'x'|indent(10**9) }}", "too large");
  expect_error("{{ 'x'|center(10**12) }}", "too large");
  expect_error("{{ ('a' * 1000000)|replace('a', 'a' * 100) }}", "too long");
  expect_error("{{ ('a' * 1000000).replace('a', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa') }}", "too long");
  expect_error("{{ '%099999999d'|format(1) }}", "too large");
  expect_error("{{ ['a' * 1000000] * 10 | join('') }}", "");
  expect_error("{{ (['a' * 1000000] * 100)|join('') }}", "too large");
  expect_error("{{ 'x'|tojson(indent=10**9) }}", "indent");
}

TEST(JinjaSandbox, RunawayRecursionIsStopped) {
  expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "recursion");
  expect_error("{% macro f() %}{{ f() ~ f() }}{% endmacro %}{{ f() }}", "recursion");
  // Mutual recursion through caller().
  expect_error(
      "{% macro a() %}{% call a() %}x{% endcall %}{% endmacro %}{{ a() }}", "recursion");
  TemplateLimits shallow;
  shallow.max_depth = 10;
  expect_error("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(20) }}",
               "recursion", shallow);
  EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}",
                   json::object(), shallow),
            "321");
}

TEST(JinjaSandbox, DeepNestingIsASyntaxErrorNotACrash) {
  std::string parens = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  expect_error(parens, "nested too deeply");
  std::string ifs;
  for (int i = 0; i < 20000; ++i) ifs += "{% if true %}";
  expect_error(ifs, "");
  std::string nots = "{{ " ;
  for (int i = 0; i < 100000; ++i) nots += "not ";
  expect_error(nots + "1 }}", "nested too deeply");
  std::string negs = "{{ " + std::string(100000, '-') + "1 }}";
  expect_error(negs, "nested too deeply");
  std::string lists = "{{ " + std::string(100000, '[') + std::string(100000, ']') + " }}";
  expect_error(lists, "nested too deeply");
}

TEST(JinjaSandbox, DeepContextIsRefused) {
  json ctx = json::object();
  json* cur = &ctx["x"];
  for (int i = 0; i < 1000; ++i) {
    cur->push_back(json::array());
    cur = &(*cur)[0];
  }
  expect_error("{{ x }}", "nested too deeply", {}, ctx);
}

TEST(JinjaSandbox, SelfReferenceDoesNotHangOrLeak) {
  expect_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", "nested too deeply");
  expect_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns|tojson }}", "JSON serializable");
  expect_error("{% set ns = namespace(l=[]) %}{% set ns.l = [ns] %}{{ ns.l == ns.l }}{{ ns }}", "nested too deeply");
}

TEST(JinjaSandbox, PrivateAttributesAreRefused) {
  json ctx = {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  for (const char* src : {"{{ messages.__class__ }}", "{{ ''.__class__.__mro__ }}",
                          "{{ messages[0]['__class__'] }}", "{{ namespace.__init__ }}",
                          "{{ range.__globals__ }}", "{{ ''['__class__'] }}",
                          "{{ messages|map(attribute='__class__')|list }}",
                          "{{ messages[0]|attr('__class__') }}", "{{ raise_exception.__code__ }}",
                          "{% set ns = namespace() %}{% set ns._x = 1 %}"}) {
    expect_error(src, "", {}, ctx);
  }
}

TEST(JinjaSandbox, TemplatesCannotModifyTheirData) {
  json ctx = {{"messages", json::array({"a"})}, {"d", {{"k", 1}}}};
  expect_error("{{ messages.append('b') }}", "unsafe", {}, ctx);
  expect_error("{{ messages.pop() }}", "unsafe", {}, ctx);
  expect_error("{{ d.update({'x': 1}) }}", "unsafe", {}, ctx);
  expect_error("{{ d.clear() }}", "unsafe", {}, ctx);
  expect_error("{% set messages.x = 1 %}", "non-namespace", {}, ctx);
}

TEST(JinjaSandbox, IntegerOverflowIsAnError) {
  expect_error("{{ 2 ** 64 }}", "overflow");
  expect_error("{{ 9223372036854775807 + 1 }}", "overflow");
  expect_error("{{ -9223372036854775807 - 2 }}", "overflow");
  expect_error("{{ 99999999999999999999 }}", "too large");
  expect_error("{{ [1, 2, 3]|sum(start=9223372036854775807) }}", "overflow");
}

TEST(JinjaSandbox, SyntaxErrorsCarryTheLine) {
  struct Case {
    const char* src;
    int line;
  };
  for (const Case& c : {Case{"a\nb\n{{ 1 + }}", 3}, Case{"x\n{% frobnicate %}", 2},
                        Case{"\n\n\n{{ 'abc }}", 4}, Case{"{% if x %}\n{% else %}\n{% elif y %}", 3},
                        Case{"\n{{ a $ b }}", 2}, Case{"1\n2\n{% for x in %}{% endfor %}", 3},
                        Case{"\n{% set %}", 2}, Case{"{% macro m( %}", 1},
                        Case{"\n\n{% endfor %}", 3}, Case{"\n{{ x | }}", 2}}) {
    try {
      ChatTemplate t(c.src);
      ADD_FAILURE() << "no syntax error for " << c.src;
    } catch (const Error& e) {
      std::string want = "line " + std::to_string(c.line);
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what() << " for " << c.src;
    }
  }
}

TEST(JinjaSandbox, OddArgumentsAreLoomErrors) {
  json ctx = {{"l", json::array({{{"a", 1}}})}};
  for (const char* src : {"{{ '{99999999999999999999}'.format() }}", "{{ '%99999s'|format('x') }}", "{{ 'a'.split('') }}",
                          "{{ 'abc'[::0] }}", "{{ 1|batch(0) }}", "{{ 'x'|truncate(1) }}"}) {
    expect_error(src, "", {}, ctx);
  }
}

TEST(JinjaSandbox, RuntimeErrorsCarryTheLine) {
  try {
    render("ok\n\n{{ 1 / 0 }}");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
  }
}

TEST(JinjaSandbox, RaiseExceptionMessageIsExact) {
  try {
    render("line\n{% if true %}{{ raise_exception('Roles must alternate') }}{% endif %}");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "Roles must alternate");
  }
}

std::vector<std::string> real_templates() {
  std::vector<std::string> out;
  std::string dir = std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/jinja/templates";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream f(entry.path());
    std::stringstream ss;
    ss << f.rdbuf();
    out.push_back(ss.str());
  }
  return out;
}

// Truncated and corrupted real templates: each either parses and renders or
// throws loom::Error; nothing else (crashes show up under ASan/UBSan).
TEST(JinjaSandbox, MangledRealTemplatesNeverCrash) {
  json ctx = json::parse(R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
      {"role": "assistant", "content": "a", "tool_calls": [{"id": "abcdefghi", "type": "function",
      "function": {"name": "f", "arguments": {"x": 1}}}]}, {"role": "tool", "content": "r", "tool_call_id": "abcdefghi"}],
      "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "tools": [{"type": "function",
      "function": {"name": "f", "parameters": {}}}]})");
  int rendered = 0, errors = 0;
  uint32_t seed = 12345;
  auto rnd = [&] {
    seed = seed * 1103515245u + 12345u;
    return seed >> 8;
  };
  const std::string noise = "{}%#-+()[]|.'\"\n ~*/";
  for (const std::string& src : real_templates()) {
    std::vector<std::string> variants;
    for (size_t cut = 0; cut < src.size(); cut += 1 + src.size() / 60) variants.push_back(src.substr(0, cut));
    for (int i = 0; i < 60; ++i) {
      std::string m = src;
      for (int k = 0; k < 3; ++k) m[rnd() % m.size()] = noise[rnd() % noise.size()];
      variants.push_back(m);
    }
    for (const std::string& v : variants) {
      try {
        ChatTemplate t(v);
        t.render(ctx);
        ++rendered;
      } catch (const Error&) {
        ++errors;
      }
    }
  }
  EXPECT_GT(rendered, 0);
  EXPECT_GT(errors, 0);
}

TEST(JinjaSandbox, ConcurrentRendersOfOneTemplate) {
  ChatTemplate t(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ m.content }}{% endfor %}"
      "{{ ns.n }}");
  json ctx = {{"messages", json::array({{{"content", "a"}}, {{"content", "b"}}})}};
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 200; ++k) ok += t.render(ctx) == "ab2";
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 800);
}

}  // namespace
}  // namespace loom
