// Unit tests of the interpreter's API and of behaviour the golden fixtures
// cannot express (contexts given as nlohmann::json, the current time, limits
// validation, value printing helpers). Language semantics are covered by
// language_cases.json, rendered by jinja2 itself.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/jinja/pystr.h"
#include "tokenizer/jinja/value.h"

#include <ctime>

namespace loom {
namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

TEST(JinjaApi, RendersWithPlainAndOrderedJson) {
  ChatTemplate t("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d|tojson }}");
  // nlohmann::json sorts keys; ordered_json keeps them as given (as Python does).
  EXPECT_EQ(t.render(json{{"d", {{"b", 1}, {"a", 2}}}}), "a=2;b=1;{\"a\": 2, \"b\": 1}");
  ordered_json ctx;
  ctx["d"]["b"] = 1;
  ctx["d"]["a"] = 2;
  EXPECT_EQ(t.render(ctx), "b=1;a=2;{\"b\": 1, \"a\": 2}");
}

TEST(JinjaApi, ContextMustBeAnObject) {
  ChatTemplate t("x");
  EXPECT_THROW(t.render(json::array()), Error);
  EXPECT_EQ(t.render(json::object()), "x");
}

TEST(JinjaApi, LimitsMustBePositive) {
  TemplateLimits bad;
  bad.max_depth = 0;
  EXPECT_THROW(ChatTemplate("x", bad), Error);
}

TEST(JinjaApi, MovedTemplateStillRenders) {
  ChatTemplate a("{{ 1 + 1 }}");
  ChatTemplate b(std::move(a));
  EXPECT_EQ(b.render(json::object()), "2");
}

TEST(JinjaApi, StrftimeNowUsesFixedOrCurrentTime) {
  ChatTemplate t("{{ strftime_now('%Y-%m-%d') }}");
  RenderOptions fixed;
  fixed.now_unix_seconds = 0;
  EXPECT_EQ(t.render(json::object(), fixed), "1970-01-01");
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::string year = std::to_string(tm.tm_year + 1900);
  EXPECT_EQ(t.render(json::object()).substr(0, 4), year);
}

TEST(JinjaApi, ContextValuesShadowBuiltins) {
  ChatTemplate t("{{ range }}|{{ bos_token }}");
  EXPECT_EQ(t.render(json{{"range", "mine"}, {"bos_token", "<s>"}}), "mine|<s>");
}

TEST(JinjaApi, JsonNumbersKeepTheirType) {
  ChatTemplate t("{{ a }} {{ b }} {{ c }} {{ a is integer }} {{ b is float }} {{ d }}");
  json ctx = {{"a", 3}, {"b", 2.0}, {"c", 18446744073709551615ull}, {"d", nullptr}};
  EXPECT_EQ(t.render(ctx), "3 2.0 1.8446744073709552e+19 True True None");
}

TEST(JinjaApi, RenderingIsRepeatable) {
  ChatTemplate t("{% set ns = namespace(n=0) %}{% set ns.n = ns.n + 1 %}{{ ns.n }}");
  EXPECT_EQ(t.render(json::object()), "1");
  EXPECT_EQ(t.render(json::object()), "1");
}

TEST(JinjaValues, FloatReprMatchesPython) {
  using jinja::format_float;
  EXPECT_EQ(format_float(1.0), "1.0");
  EXPECT_EQ(format_float(-0.0), "-0.0");
  EXPECT_EQ(format_float(0.1), "0.1");
  EXPECT_EQ(format_float(1e16), "1e+16");
  EXPECT_EQ(format_float(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(format_float(1e-4), "0.0001");
  EXPECT_EQ(format_float(1e-5), "1e-05");
  EXPECT_EQ(format_float(1.5e-7), "1.5e-07");
  EXPECT_EQ(format_float(1e300 * 1e10), "inf");
  EXPECT_EQ(format_float(2.5e100), "2.5e+100");
}

TEST(JinjaValues, ReprQuotesLikePython) {
  using jinja::Value;
  EXPECT_EQ(jinja::repr(Value("it's")), "\"it's\"");
  EXPECT_EQ(jinja::repr(Value("say \"x\" it's")), "'say \"x\" it\\'s'");
  EXPECT_EQ(jinja::repr(Value("a\nb\\")), "'a\\nb\\\\'");
  EXPECT_EQ(jinja::to_str(jinja::make_list({Value(1), Value::none(), Value(true)}, true)),
            "(1, None, True)");
  EXPECT_EQ(jinja::to_str(jinja::make_list({Value(1)}, true)), "(1,)");
}

TEST(JinjaStrings, PythonStringSemantics) {
  using namespace jinja;
  EXPECT_EQ(utf8_length("héllo 你好"), 8u);
  EXPECT_EQ(py_upper("straße"), "STRASSE");
  EXPECT_EQ(py_title("hello wORLD 1st"), "Hello World 1St");
  EXPECT_EQ(jinja_title("hello wORLD-foo(bar"), "Hello World-Foo(Bar");
  EXPECT_EQ(py_strip("\u00a0 x \t", std::nullopt, StripSide::kBoth), "x");
  auto parts = py_split("  a  b ", std::nullopt, -1);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1], "b");
  auto r = py_rsplit("a,b,c", std::string(","), 1);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0], "a,b");
  EXPECT_EQ(py_replace("abc", "", "-", -1, 100), "-a-b-c-");
  EXPECT_EQ(py_find("héllo", "l", false), 2);
  // Invalid UTF-8 never crashes; each stray byte counts as one code point.
  EXPECT_EQ(utf8_length(std::string("\xff\xfe" "a\xe4", 4)), 4u);
}

TEST(JinjaLanguage, InvalidUtf8InContextIsHandled) {
  ChatTemplate t("{{ s|length }} {{ s[::-1]|length }} {{ s|upper|length }}");
  ordered_json ctx;
  ctx["s"] = std::string("ab\xff", 3);
  EXPECT_EQ(t.render(ctx), "3 3 3");
}

TEST(JinjaLanguage, GenerationTagsRenderTheirBody) {
  ChatTemplate t("{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}"
                 "{% endgeneration %}{% else %}[{{ m.content }}]{% endif %}{% endfor %}");
  json ctx = {{"messages", json::array({{{"role", "user"}, {"content", "q"}},
                                        {{"role", "assistant"}, {"content", "a"}}})}};
  EXPECT_EQ(t.render(ctx), "[q]a");
}

}  // namespace
}  // namespace loom
