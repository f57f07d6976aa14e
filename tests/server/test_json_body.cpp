// Bounded JSON body parsing: the same tree as nlohmann's parser (key order,
// repeated keys), a cost linear in the body (many distinct keys), and the
// deadline.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "server/api_error.h"
#include "server/json_body.h"

using namespace loom::server;
using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

namespace {

std::string object_of_keys(size_t n, const std::string& prefix = "k") {
  std::string s = "{\"prompt\": \"hi\", \"max_tokens\": 1";
  for (size_t i = 0; i < n; ++i) s += ",\"" + prefix + std::to_string(i) + "\":0";
  s += "}";
  return s;
}

double seconds_to_parse(const std::string& body) {
  const auto t0 = Clock::now();
  const Json j = parse_json_body(body, body.size(), 64);
  EXPECT_TRUE(j.is_object());
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

TEST(JsonBody, SameTreeAsNlohmann) {
  const std::string bodies[] = {
      R"({"b": 1, "a": [1, 2.5, -3, true, null, "x\u00e9\ud83d\ude00"], "c": {"z": {}, "y": []}})",
      R"({"a": 1, "b": 2, "a": 3})",  // repeated key: first position, last value
      R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"q": 1, "p": 2}}}]})",
      R"({"n": 18446744073709551615, "m": -9223372036854775808, "f": 1e308})",
  };
  for (const auto& b : bodies)
    EXPECT_EQ(parse_json_body(b, 1 << 20, 64).dump(), Json::parse(b).dump()) << b;
  // Repeated keys in an object large enough to be indexed.
  std::string big = object_of_keys(100);
  big.back() = ',';
  big += "\"k7\": 5, \"prompt\": \"again\"}";
  EXPECT_EQ(parse_json_body(big, 1 << 20, 64).dump(), Json::parse(big).dump());
}

TEST(JsonBody, RejectsWhatItShould) {
  for (std::string bad : {"{", "{\"a\": }", "[1]", "\"s\"", "", "{} x", "{\"a\": 1,}", "nul"}) {
    try {
      parse_json_body(bad, 1 << 20, 64);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400) << bad;
    }
  }
}

// 330,000 distinct keys (3.8 MB, under the 4 MiB body limit) took minutes
// when every insertion scanned the object's keys.
TEST(JsonBody, ManyDistinctKeysParseInLinearTime) {
  const std::string body = object_of_keys(330000);
  ASSERT_LT(body.size(), size_t(4) << 20);
  EXPECT_LT(seconds_to_parse(body), 15.0);  // ~0.3 s here; minutes before
  // Many mid-sized objects.
  std::string many = "{\"objs\": [";
  for (int o = 0; o < 200; ++o) {
    if (o > 0) many += ',';
    many += object_of_keys(2000, "o");
  }
  many += "]}";
  EXPECT_LT(seconds_to_parse(many), 15.0);
}

TEST(JsonBody, Deadline) {
  const std::string body = object_of_keys(50000);
  try {
    parse_json_body(body, body.size(), 64, Clock::now() - std::chrono::seconds(1));
    ADD_FAILURE() << "no deadline error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("in time"), std::string::npos);
  }
  // Small bodies never look at the clock.
  EXPECT_NO_THROW(parse_json_body("{\"a\": 1}", 100, 64, Clock::now() - std::chrono::seconds(1)));
}
