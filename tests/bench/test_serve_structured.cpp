// The pure pieces of `loom bench serve --json-schema`: the response_format it
// sends, and quantiles of a /metrics histogram between two scrapes.
#include <gtest/gtest.h>

#include "serve_structured.h"

using namespace loom::bench;

namespace {

std::string metrics_text(double b1, double b2, double b4, double count, double sum) {
  return "# TYPE m histogram\n"
         "m_bucket{le=\"1e-06\"} " +
         std::to_string(b1) + "\n" + "m_bucket{le=\"2e-06\"} " + std::to_string(b2) + "\n" +
         "m_bucket{le=\"4e-06\"} " + std::to_string(b4) + "\n" + "m_bucket{le=\"+Inf\"} " +
         std::to_string(count) + "\n" + "m_sum " + std::to_string(sum) + "\nm_count " +
         std::to_string(count) + "\n";
}

}  // namespace

TEST(ServeStructured, JsonSchemaFormatAndColdNonce) {
  const nlohmann::json schema = {{"type", "object"}};
  const auto warm = json_schema_format(schema);
  EXPECT_EQ(warm["type"], "json_schema");
  EXPECT_EQ(warm["json_schema"]["schema"], schema);
  const auto cold = json_schema_format(schema, "7");
  EXPECT_EQ(cold["json_schema"]["schema"]["title"], "bench 7");
  EXPECT_NE(cold.dump(), json_schema_format(schema, "8").dump());
}

TEST(ServeStructured, HistogramQuantilesBetweenScrapes) {
  const auto before =
      read_histogram(loom::net::parse_prometheus(metrics_text(5, 5, 5, 5, 5e-6)), "m");
  // 100 new observations: 50 in (1, 2] us, 49 in (2, 4] us, 1 above 4 us.
  const auto after = read_histogram(
      loom::net::parse_prometheus(metrics_text(5, 55, 104, 105, 5e-6 + 300e-6)), "m");
  ASSERT_TRUE(after.found);
  ASSERT_EQ(after.bounds.size(), 3u);
  const auto d = histogram_delta_us(before, after);
  EXPECT_DOUBLE_EQ(d["count"].get<double>(), 100);
  EXPECT_NEAR(d["mean"].get<double>(), 3.0, 1e-9);
  EXPECT_NEAR(d["p50"].get<double>(), 2.0, 1e-9);  // the top of the first new bucket
  EXPECT_NEAR(d["p90"].get<double>(), 2.0 + 40.0 / 49.0 * 2.0, 1e-9);
  EXPECT_NEAR(d["p99"].get<double>(), 4.0, 1e-9);
  EXPECT_TRUE(histogram_delta_us(before, read_histogram({}, "m")).empty());
}
