// Serving-benchmark workloads and request bodies.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "core/error.h"
#include "serve_workload.h"

namespace loom::bench {
namespace {

std::vector<int32_t> range(int32_t lo, int32_t hi) {
  std::vector<int32_t> v;
  for (int32_t i = lo; i < hi; ++i) v.push_back(i);
  return v;
}

TEST(ServeWorkload, FixedAndSyntheticAreSeededSingleTurns) {
  ServeWorkloadSpec s;
  s.dataset = "fixed";
  s.num_requests = 5;
  s.input_len = 16;
  s.output_len = 3;
  auto c = make_serve_workload(s, range(1000, 2000));
  ASSERT_EQ(c.size(), 5u);
  for (const auto& conv : c) {
    ASSERT_EQ(conv.turns.size(), 1u);
    EXPECT_EQ(conv.turns[0].question.size(), 16u);
    EXPECT_EQ(conv.turns[0].output_len, 3);
    for (int32_t id : conv.turns[0].question) EXPECT_TRUE(id >= 1000 && id < 2000);
  }
  s.dataset = "synthetic";
  s.num_requests = 200;
  auto a = make_serve_workload(s, range(0, 100)), b = make_serve_workload(s, range(0, 100));
  std::set<size_t> lens;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].turns[0].question, b[i].turns[0].question);
    lens.insert(a[i].turns[0].question.size());
  }
  EXPECT_GT(lens.size(), 50u);  // lognormal lengths, not one length
  s.dataset = "bogus";
  EXPECT_THROW(make_serve_workload(s, range(0, 10)), Error);
}

TEST(ServeWorkload, SharedPrefixGroupsQuestionsUnderNPrefixes) {
  ServeWorkloadSpec s;
  s.dataset = "shared-prefix";
  s.num_requests = 12;
  s.num_prefixes = 3;
  s.prefix_len = 20;
  s.input_len = 5;
  s.output_len = 2;
  auto c = make_serve_workload(s, range(0, 1000));
  ASSERT_EQ(c.size(), 12u);
  std::map<std::vector<int32_t>, int> count;
  for (const auto& conv : c) {
    EXPECT_EQ(conv.prefix.size(), 20u);
    EXPECT_EQ(conv.turns[0].question.size(), 5u);
    ++count[conv.prefix];
  }
  ASSERT_EQ(count.size(), 3u);
  for (const auto& [p, n] : count) EXPECT_EQ(n, 4);
}

TEST(ServeWorkload, MultiTurnResendsHistory) {
  ServeWorkloadSpec s;
  s.dataset = "multi-turn";
  s.num_requests = 7;
  s.num_turns = 3;
  s.input_len = 4;
  s.output_len = 2;
  auto c = make_serve_workload(s, range(0, 500));
  ASSERT_EQ(c.size(), 3u);  // 3 + 3 + 1 turns
  EXPECT_EQ(c[2].turns.size(), 1u);
  BodyOptions o;
  int64_t len = 0;
  auto body = request_body(c[0], 2, {}, o, &len);
  EXPECT_EQ(len, 4 + 2 + 4 + 2 + 4);
  ASSERT_EQ(body["prompt"].size(), 16u);
  std::vector<int32_t> want = c[0].turns[0].question;
  for (auto* v : {&c[0].turns[0].answer, &c[0].turns[1].question, &c[0].turns[1].answer,
                  &c[0].turns[2].question})
    want.insert(want.end(), v->begin(), v->end());
  EXPECT_EQ(body["prompt"].get<std::vector<int32_t>>(), want);
  EXPECT_EQ(body["max_tokens"], 2);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["ignore_eos"], true);

  o.endpoint = ServeEndpoint::Chat;
  o.token_ids = false;
  auto chat = request_body(c[0], 1, {"the real answer"}, o, &len);
  ASSERT_EQ(chat["messages"].size(), 3u);
  EXPECT_EQ(chat["messages"][1]["role"], "assistant");
  EXPECT_EQ(chat["messages"][1]["content"], "the real answer");
  EXPECT_EQ(chat["messages"][2]["content"], render_words(c[0].turns[1].question));
}

TEST(ServeWorkload, CalibrateTextMatchesTheCounter) {
  ServeWorkloadSpec s;
  s.dataset = "fixed";
  s.num_requests = 4;
  s.input_len = 30;
  auto c = make_serve_workload(s, range(0, static_cast<int32_t>(prompt_words().size())));
  // A tokenizer that splits every word longer than 5 letters in two.
  auto count = [](const std::string& text) -> std::optional<int64_t> {
    int64_t n = 0;
    size_t i = 0;
    while (i < text.size()) {
      size_t j = text.find(' ', i + 1);
      if (j == std::string::npos) j = text.size();
      n += (j - i - 1) > 5 ? 2 : 1;
      i = j;
    }
    return n;
  };
  const int64_t off = calibrate_text(c, count, 1, 8);
  EXPECT_EQ(off, 0);
  for (const auto& conv : c) EXPECT_EQ(*count(render_words(conv.turns[0].question)), 30);
  // Without a tokenizer, one word per token.
  auto none = [](const std::string&) -> std::optional<int64_t> { return std::nullopt; };
  auto d = make_serve_workload(s, range(0, 10));
  EXPECT_EQ(calibrate_text(d, none, 1), 0);
  EXPECT_EQ(d[0].turns[0].question.size(), 30u);
}

}  // namespace
}  // namespace loom::bench
