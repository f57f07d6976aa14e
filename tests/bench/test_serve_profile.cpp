// bench/serve_profile: the server's request stages read from /metrics text
// and the report of an interval (after - before), step profile included.
#include <gtest/gtest.h>

#include "serve_profile.h"

using namespace loom;
using namespace loom::bench;

TEST(ServeProfile, StagesFromMetricsAndTheIntervalReport) {
  const std::string before_text =
      "# TYPE loom_request_prefill_seconds histogram\n"
      "loom_request_prefill_seconds_bucket{le=\"0.1\"} 1\n"
      "loom_request_prefill_seconds_sum 0.5\n"
      "loom_request_prefill_seconds_count 2\n"
      "loom_request_deliver_seconds_sum 0.001\n"
      "loom_request_deliver_seconds_count 2\n"
      "loom_requests_total{route=\"/v1/completions\",status=\"200\"} 2\n";
  const std::string after_text =
      "loom_request_prefill_seconds_sum 2.5\n"
      "loom_request_prefill_seconds_count 6\n"
      "loom_request_deliver_seconds_sum 0.005\n"
      "loom_request_deliver_seconds_count 6\n"
      "loom_request_decode_seconds_sum 8\n"
      "loom_request_decode_seconds_count 4\n";
  ServerProfile before, after;
  before.stages = request_stages(before_text);
  after.stages = request_stages(after_text);
  ASSERT_EQ(before.stages.size(), 2u);
  EXPECT_DOUBLE_EQ(before.stages["loom_request_prefill_seconds"].first, 0.5);
  EXPECT_DOUBLE_EQ(before.stages["loom_request_prefill_seconds"].second, 2);

  StepProfile p0, p1;
  p0.enabled = p1.enabled = true;
  p0.at(StepKind::Decode, true).steps = 5;
  p1.at(StepKind::Decode, true).steps = 15;
  p1.at(StepKind::Decode, true).wall_s = 0.1;
  p1.at(StepKind::Decode, true).phase_s[size_t(StepPhase::Launch)] = 0.05;
  before.steps = p0;
  after.steps = p1;
  const nlohmann::json r = server_profile_report(before, after, 1.0);
  const auto& prefill = r.at("server_stages").at("prefill");
  EXPECT_DOUBLE_EQ(prefill.at("requests").get<double>(), 4);
  EXPECT_DOUBLE_EQ(prefill.at("mean_ms").get<double>(), 500);  // 2 s over 4 requests
  EXPECT_DOUBLE_EQ(r.at("server_stages").at("deliver").at("mean_ms").get<double>(), 1);
  EXPECT_DOUBLE_EQ(r.at("server_stages").at("decode").at("mean_ms").get<double>(), 2000);
  EXPECT_FALSE(r.at("server_stages").contains("prepare"));  // the server had none
  const auto& rows = r.at("step_profile").at("rows");
  ASSERT_GE(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("kind"), "decode");
  EXPECT_EQ(rows[0].at("forward"), "graph");
  EXPECT_EQ(rows[0].at("steps"), 10);
  EXPECT_DOUBLE_EQ(rows[0].at("launch").at("mean_ms").get<double>(), 5);
  // No step profile on either side: no step_profile key.
  before.steps.reset();
  EXPECT_FALSE(server_profile_report(before, after, 1.0).contains("step_profile"));
}
