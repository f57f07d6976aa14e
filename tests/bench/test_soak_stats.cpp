// The soak run's pure pieces: the request mix, the RSS slope and the window
// tally.
#include <gtest/gtest.h>

#include <cmath>

#include "soak_stats.h"

using namespace loom::bench;

TEST(SoakStats, MixSumsToOne) {
  double sum = 0;
  for (SoakKind k : soak_kinds()) {
    EXPECT_GT(soak_kind_weight(k), 0) << soak_kind_name(k);
    sum += soak_kind_weight(k);
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
}

TEST(SoakStats, LeastSquaresSlope) {
  EXPECT_NEAR(least_squares_slope({0, 1, 2, 3}, {5, 7, 9, 11}), 2.0, 1e-12);
  EXPECT_NEAR(least_squares_slope({0, 1, 2, 3}, {1, 0, 1, 0}), -0.2, 1e-12);
  EXPECT_EQ(least_squares_slope({1}, {3}), 0);
  EXPECT_EQ(least_squares_slope({2, 2}, {1, 5}), 0);
}

TEST(SoakStats, MemorySlopeSkipsWarmup) {
  std::vector<SoakServerSample> samples;
  for (int i = 0; i <= 12; ++i) {
    SoakServerSample s;
    s.t_s = i * 300.0;                              // every 5 minutes for an hour
    s.rss_bytes = i < 2 ? i * 100000000 : 200000000 + i * 500000;  // warm-up, then 6 MB/hour
    s.rss_anon_bytes = 50000000;
    s.fds = 20;
    samples.push_back(s);
  }
  const auto j = soak_memory_summary(samples, 600);
  EXPECT_NEAR(j["rss_mb_per_hour"].get<double>(), 6.0, 1e-9);
  EXPECT_NEAR(j["rss_anon_mb_per_hour"].get<double>(), 0.0, 1e-9);
  EXPECT_EQ(j["slope_samples"].get<int64_t>(), 11);
  EXPECT_EQ(j["rss_bytes"]["max"].get<int64_t>(), 206000000);
}

TEST(SoakStats, WindowSummary) {
  std::vector<SoakRecord> rs(3);
  rs[0] = {SoakKind::Stream, 0.0, 0.1, 1.0, 200, true, ""};
  rs[1] = {SoakKind::BadRequest, 0.0, -1, 0.01, 400, true, ""};
  rs[2] = {SoakKind::Plain, 0.0, -1, 0.5, 500, false, "HTTP 500"};
  const auto j = soak_window_summary(rs);
  EXPECT_EQ(j["total"], 3);
  EXPECT_EQ(j["unexpected"], 1);
  EXPECT_EQ(j["requests"]["stream"], 1);
  EXPECT_EQ(j["statuses"]["400"], 1);
  EXPECT_EQ(j["unexpected_examples"][0], "plain: HTTP 500");
  EXPECT_NEAR(j["ttft_ms"]["p50"].get<double>(), 100.0, 1e-6);
  EXPECT_NEAR(j["e2e_ms"]["max"].get<double>(), 1000.0, 1e-6);
}
