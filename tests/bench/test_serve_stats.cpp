// Pure parts of `loom bench serve`: SSE parsing, stream events -> records,
// summaries (percentiles, goodput), Poisson arrivals, the /metrics tracker.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "report.h"
#include "serve_client.h"
#include "serve_stats.h"
#include "sse.h"

namespace loom::bench {
namespace {

TEST(SseParser, SplitsAnywhereAndJoinsDataLines) {
  const std::string stream =
      ": keep-alive\r\n\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata: line1\ndata:line2\n\ndata: "
      "[DONE]\n\n";
  for (size_t piece = 1; piece <= stream.size(); ++piece) {
    std::vector<std::string> got;
    SseParser p([&](std::string_view d) { got.emplace_back(d); });
    for (size_t i = 0; i < stream.size(); i += piece)
      p.feed(std::string_view(stream).substr(i, piece));
    p.finish();
    ASSERT_EQ(got.size(), 3u) << "piece " << piece;
    EXPECT_EQ(got[0], "{\"a\":1}");
    EXPECT_EQ(got[1], "line1\nline2");
    EXPECT_EQ(got[2], "[DONE]");
  }
}

TEST(SseParser, FinishDeliversAnUnterminatedEvent) {
  std::vector<std::string> got;
  SseParser p([&](std::string_view d) { got.emplace_back(d); });
  p.feed("data: tail");
  EXPECT_TRUE(got.empty());
  p.finish();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], "tail");
}

TEST(ApplySseEvent, TimesTextChunksAndReadsUsage) {
  RequestRecord r;
  std::string answer;
  EXPECT_FALSE(apply_sse_event(R"({"choices":[{"index":0,"text":"Hel"}]})", 1.0,
                               ServeEndpoint::Completions, r, &answer));
  EXPECT_FALSE(apply_sse_event(R"({"choices":[{"index":0,"text":""}]})", 1.5,
                               ServeEndpoint::Completions, r, &answer));
  EXPECT_FALSE(apply_sse_event(R"({"choices":[{"index":0,"text":"lo"}]})", 2.0,
                               ServeEndpoint::Completions, r, &answer));
  EXPECT_FALSE(
      apply_sse_event(R"({"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}})", 2.1,
                      ServeEndpoint::Completions, r, &answer));
  EXPECT_TRUE(apply_sse_event("[DONE]", 2.2, ServeEndpoint::Completions, r, &answer));
  EXPECT_EQ(answer, "Hello");
  EXPECT_EQ(r.chunk_s, (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(r.prompt_tokens, 7);
  EXPECT_EQ(r.output_tokens, 3);
  EXPECT_TRUE(r.usage_reported);
  EXPECT_TRUE(r.error.empty());
}

TEST(ApplySseEvent, ChatDeltasAndErrors) {
  RequestRecord r;
  std::string answer;
  apply_sse_event(R"({"choices":[{"delta":{"role":"assistant"}}]})", 0.5, ServeEndpoint::Chat, r,
                  &answer);
  EXPECT_TRUE(r.chunk_s.empty());  // a role-only delta is not a token
  apply_sse_event(R"({"choices":[{"delta":{"content":"Hi"}}]})", 0.7, ServeEndpoint::Chat, r,
                  &answer);
  EXPECT_EQ(r.chunk_s.size(), 1u);
  apply_sse_event(R"({"error":{"message":"engine queue full","code":503}})", 0.8,
                  ServeEndpoint::Chat, r, &answer);
  EXPECT_EQ(r.error, "stream error: engine queue full");
  RequestRecord bad;
  apply_sse_event("{not json", 0, ServeEndpoint::Chat, bad, nullptr);
  EXPECT_NE(bad.error.find("unparsable"), std::string::npos);
}

RequestRecord record(double send, std::vector<double> chunks, double done, int64_t out) {
  RequestRecord r;
  r.send_s = send;
  r.chunk_s = std::move(chunks);
  r.done_s = done;
  r.output_tokens = out;
  r.prompt_tokens = 10;
  r.ok = true;
  r.usage_reported = true;
  return r;
}

TEST(Summarize, RatesPercentilesAndGoodput) {
  // TTFT 100 ms, TPOT (1.0 - 0.1) / 9 = 100 ms: misses a 50 ms TPOT SLO.
  std::vector<RequestRecord> recs = {record(0, {0.1, 0.2, 1.0}, 1.0, 10),
                                     // TTFT 50 ms, TPOT (0.5 - 0.05) / 9 = 50 ms: meets it.
                                     record(0, {0.05, 0.5}, 0.5, 10)};
  RequestRecord failed;
  failed.error = "HTTP 503: busy";
  recs.push_back(failed);
  const Slo slo{200, 50, 0};
  EXPECT_FALSE(meets_slo(recs[0], slo));
  EXPECT_TRUE(meets_slo(recs[1], slo));
  EXPECT_FALSE(meets_slo(recs[2], slo));
  auto j = summarize(recs, 2.0, slo);
  EXPECT_EQ(j["num_requests"], 3);
  EXPECT_EQ(j["completed"], 2);
  EXPECT_EQ(j["errors"], 1);
  EXPECT_EQ(j["error_messages"][0], "HTTP 503: busy");
  EXPECT_DOUBLE_EQ(j["requests_per_s"].get<double>(), 1.0);
  EXPECT_EQ(j["output_tokens"], 20);
  EXPECT_DOUBLE_EQ(j["output_tokens_per_s"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(j["input_tokens_per_s"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(j["ttft_ms"]["mean"].get<double>(), 75.0);
  EXPECT_DOUBLE_EQ(j["tpot_ms"]["max"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(j["itl_ms"]["max"].get<double>(), 800.0);  // every chunk gap: 100, 800, 450
  EXPECT_EQ(j["goodput"]["requests_meeting_slo"], 1);
  EXPECT_DOUBLE_EQ(j["goodput"]["requests_per_s"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["goodput"]["fraction"].get<double>(), 0.3333);
}

TEST(Percentiles, InterpolatesBetweenRanks) {
  std::vector<double> v(101);
  std::iota(v.begin(), v.end(), 0.0);
  auto p = percentiles(v);
  EXPECT_DOUBLE_EQ(p.p50, 50);
  EXPECT_DOUBLE_EQ(p.p90, 90);
  EXPECT_DOUBLE_EQ(p.p99, 99);
  EXPECT_DOUBLE_EQ(p.mean, 50);
  EXPECT_DOUBLE_EQ(percentiles({1, 2}).p50, 1.5);
}

TEST(PoissonArrivals, SeededIncreasingWithTheRightMean) {
  auto a = poisson_arrivals(20000, 8.0, 42);
  EXPECT_EQ(a, poisson_arrivals(20000, 8.0, 42));
  EXPECT_NE(a, poisson_arrivals(20000, 8.0, 43));
  double sum = 0, sq = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double gap = a[i] - (i ? a[i - 1] : 0.0);
    ASSERT_GT(gap, 0);
    sum += gap;
    sq += gap * gap;
  }
  const double mean = sum / a.size(), var = sq / a.size() - mean * mean;
  EXPECT_NEAR(mean, 1.0 / 8, 0.005);            // exponential gaps: mean 1/rate
  EXPECT_NEAR(std::sqrt(var), 1.0 / 8, 0.005);  // and standard deviation 1/rate
  for (double t : poisson_arrivals(5, std::numeric_limits<double>::infinity(), 1)) EXPECT_EQ(t, 0);
}

TEST(ServerMetricsTracker, TracksPeaksAndDeltas) {
  const std::string before =
      "# HELP loom_kv_cache_usage_ratio used\n# TYPE loom_kv_cache_usage_ratio gauge\n"
      "loom_kv_cache_usage_ratio 0.1\nloom_preemptions_total 3\n"
      "loom_requests_total{route=\"/v1/completions\",status=\"200\"} 5\n";
  const auto s = net::parse_prometheus(before);
  ServerMetricsTracker t;
  t.observe(s, true);
  t.observe(net::parse_prometheus("loom_kv_cache_usage_ratio 0.9\nloom_preemptions_total 4\n"), false);
  t.observe(net::parse_prometheus("loom_kv_cache_usage_ratio 0\nloom_preemptions_total 7\n"), false);
  t.observe_rss(100 << 20, 150 << 20);
  auto j = t.to_json();
  EXPECT_EQ(j["scrapes"], 3);
  EXPECT_DOUBLE_EQ(j["kv_cache_usage_ratio"]["peak"].get<double>(), 0.9);
  EXPECT_DOUBLE_EQ(j["kv_cache_usage_ratio"]["before"].get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(j["kv_cache_usage_ratio"]["after"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(j["preemptions"].get<double>(), 4.0);
  EXPECT_EQ(j["process_peak_rss_mib"], 150);
}

}  // namespace
}  // namespace loom::bench
