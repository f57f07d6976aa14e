// parse_prometheus: samples of the Prometheus text exposition format as loom,
// vLLM, SGLang and llama.cpp serve them, and lines it must skip.
#include <gtest/gtest.h>

#include <cmath>

#include "net/prometheus_text.h"

namespace loom::net {
namespace {

TEST(PrometheusText, ParsesNamesLabelsAndValues) {
  const std::string text =
      "# HELP loom_kv_cache_usage_ratio used\n# TYPE loom_kv_cache_usage_ratio gauge\n"
      "loom_kv_cache_usage_ratio 0.1\nloom_preemptions_total 3\n"
      "loom_requests_total{route=\"/v1/completions\",status=\"200\"} 5\n"
      "vllm:num_requests_running{model_name=\"m}\"} 2 1700000000\nbad line here\n";
  const auto s = parse_prometheus(text);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].name, "loom_kv_cache_usage_ratio");
  EXPECT_EQ(s[0].labels, "");
  EXPECT_DOUBLE_EQ(s[0].value, 0.1);
  EXPECT_EQ(s[1].name, "loom_preemptions_total");
  EXPECT_EQ(s[1].value, 3);
  EXPECT_EQ(s[2].name, "loom_requests_total");
  EXPECT_EQ(s[2].labels, "route=\"/v1/completions\",status=\"200\"");
  EXPECT_EQ(s[2].value, 5);
  // A '}' inside a quoted label value, and a trailing timestamp.
  EXPECT_EQ(s[3].name, "vllm:num_requests_running");
  EXPECT_EQ(s[3].labels, "model_name=\"m}\"");
  EXPECT_EQ(s[3].value, 2);
}

TEST(PrometheusText, SpecialValuesEscapesAndLineEndings) {
  const auto s =
      parse_prometheus("a +Inf\r\nb -Inf\r\nc NaN\nd{x=\"q\\\"}\"} 1e3\n  e\t2\nf{x=\"1\"}7\n");
  ASSERT_EQ(s.size(), 6u);
  EXPECT_TRUE(std::isinf(s[0].value) && s[0].value > 0);
  EXPECT_TRUE(std::isinf(s[1].value) && s[1].value < 0);
  EXPECT_TRUE(std::isnan(s[2].value));
  EXPECT_EQ(s[3].name, "d");
  EXPECT_EQ(s[3].labels, "x=\"q\\\"}\"");  // an escaped quote does not end the value
  EXPECT_EQ(s[3].value, 1000);
  EXPECT_EQ(s[4].name, "e");  // leading blanks, tab separator
  EXPECT_EQ(s[4].value, 2);
  EXPECT_EQ(s[5].labels, "x=\"1\"");
  EXPECT_EQ(s[5].value, 7);
}

TEST(PrometheusText, SkipsMalformedLines) {
  const auto s = parse_prometheus(
      "\n# comment\nno_value\nbad_value abc\npartial 12x\nunclosed{a=\"1\" 3\n{x=\"1\"} 4\nok 1\n");
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].name, "ok");
  EXPECT_TRUE(parse_prometheus("").empty());
}

}  // namespace
}  // namespace loom::net
