// Jump-forward on the CPU backend with the tiny fixture models and a real
// grammar (a JSON schema compiled by xgrammar over a small hand-made
// vocabulary): a constrained sequence's forced tokens (the schema's long
// keys) are proposed and verified in one pass, the outputs are exactly those
// of plain decoding (greedy and seeded sampling, batched, with n-gram
// speculation beside it, under preemption), and the run takes fewer steps.
// The forced tokens of the vocabulary's own cut of the key are accepted; no
// KV block is left in use. Also: a grammar that forces a string without end
// gives a bounded proposal instead of a hang.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "backend/backend.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/transformer.h"
#include "structured/grammar_compiler.h"
#include "tokenizer/tokenizer.h"
#include "../common/step_costs.h"

namespace loom {
namespace {

using json = nlohmann::ordered_json;

std::string fixture(const std::string& name) {
  return std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

// The fixture models' 256 ids: 0..2 special (2 is eos), then JSON's
// punctuation, the words of the schema's keys (one way to spell each key) and
// a few letters and digits for the values, the rest special (never allowed).
// encode() takes the longest token at each position, as a BPE vocabulary's
// merges usually do.
class JsonTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kEos = 2;
  explicit JsonTokenizer(int32_t vocab) : vocab_(size_t(vocab)) {
    std::vector<std::string> words = {
        "{",     "}",   "\"",  ":",   ",",        " ",         "\n",       "\":",      "\": \"",
        " \"",   "\",", "\"}", "{\"", "customer", "_shipping", "_address", "_billing", "_name",
        "order", "_id", "ab",  "cd",  "ef",       "x",         "y",        "z"};
    for (char c = '0'; c <= '9'; ++c) words.push_back(std::string(1, c));
    for (size_t i = 0; i < words.size(); ++i) vocab_[3 + i] = words[i];
    special_.eos = kEos;
    special_.eos_ids = {kEos};
  }
  std::vector<int32_t> encode(std::string_view text, bool, bool) const override {
    std::vector<int32_t> out;
    size_t at = 0;
    while (at < text.size()) {
      int32_t best = -1;
      size_t len = 0;
      for (int32_t id = 0; id < vocab_size(); ++id) {
        const std::string& t = vocab_[size_t(id)];
        if (!t.empty() && t.size() > len && text.substr(at, t.size()) == t)
          best = id, len = t.size();
      }
      if (best < 0) return out;  // a byte the vocabulary lacks
      out.push_back(best);
      at += len;
    }
    return out;
  }
  std::string token_bytes(int32_t id, bool) const override { return vocab_[size_t(id)]; }
  std::string decode(const std::vector<int32_t>& ids, bool) const override {
    std::string s;
    for (int32_t id : ids) s += token_bytes(id, false);
    return s;
  }
  int32_t vocab_size() const override { return int32_t(vocab_.size()); }
  bool is_special(int32_t id) const override { return vocab_[size_t(id)].empty(); }
  std::optional<int32_t> token_id(std::string_view) const override { return std::nullopt; }
  std::string_view token_text(int32_t id) const override { return vocab_[size_t(id)]; }
  int32_t id(const std::string& t) const {
    return int32_t(std::find(vocab_.begin(), vocab_.end(), t) - vocab_.begin());
  }

 private:
  std::vector<std::string> vocab_;  // "": special
};

// Long keys the vocabulary cuts into several tokens; short values.
json order_schema() {
  const json str = {{"type", "string"}, {"maxLength", 6}};
  return {{"type", "object"},
          {"properties",
           {{"customer_shipping_address", str},
            {"customer_billing_name", str},
            {"order_id", {{"type", "integer"}, {"minimum", 0}, {"maximum", 99}}}}},
          {"required", {"customer_shipping_address", "customer_billing_name", "order_id"}},
          {"additionalProperties", false}};
}

using testing_util::weight_bound_seconds;

class JumpForwardTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { cpu_ = make_cpu_backend(2).release(); }
  static void TearDownTestSuite() {
    delete cpu_;
    cpu_ = nullptr;
  }
  void SetUp() override {
    if (!structured::GrammarCompiler::available()) GTEST_SKIP() << "built without xgrammar";
    model_ = open_model(fixture(GetParam()));
    vocab_ = int32_t(model_.config.vocab_size);
    tokenizer_ = std::make_unique<JsonTokenizer>(vocab_);
    compiler_ = std::make_unique<structured::GrammarCompiler>(*tokenizer_, vocab_);
    schema_ = compiler_->compile(structured::json_schema_spec(order_schema()));
  }

  // Prompts that start the object, so the outputs reach the keys early;
  // greedy, seeded sampling at temperature 1, n = 2 siblings.
  std::vector<Request> workload(int count) const {
    std::mt19937_64 rng(11);
    std::vector<Request> reqs;
    for (int i = 0; i < count; ++i) {
      Request r;
      for (int k = 0; k < 3 + int(rng() % 12); ++k) r.prompt_ids.push_back(int32_t(3 + rng() % 30));
      r.constraint = schema_;
      SamplingParams& p = r.params;
      p.max_tokens = 120;
      switch (i % 4) {
        case 1:
          p.temperature = 1.0f, p.seed = 300 + uint64_t(i);
          break;
        case 2:
          p.temperature = 0.8f, p.seed = 400 + uint64_t(i), p.top_k = 20;
          break;
        case 3:
          p.n = 2, p.temperature = 1.0f, p.seed = 500 + uint64_t(i);
          break;
        default:
          p.temperature = 0.0f;
          break;
      }
      reqs.push_back(r);
    }
    return reqs;
  }

  std::vector<Result> run(const std::vector<Request>& reqs, bool jump_forward,
                          SpeculativeConfig spec = {}, int32_t blocks = 512, bool async = true) {
    Transformer model(model_.config, *model_.weights, *cpu_);
    EngineConfig c;
    c.num_kv_blocks = blocks;
    c.block_size = 4;
    c.scheduler.max_num_batched_tokens = 256;
    c.scheduler.max_num_seqs = 32;
    c.eos_ids = {JsonTokenizer::kEos};
    c.jump_forward.enabled = jump_forward;
    spec.max_batch = 0;  // jump-forward for every decoding sequence, however many
    spec.fixed_step_seconds = weight_bound_seconds;
    c.speculative = spec;
    c.async_scheduling = async;
    Engine engine(model, nullptr, c);
    auto res = engine.generate(reqs);
    last_ = engine.stats();
    EXPECT_EQ(last_.kv.used_blocks, 0);
    for (const auto& r : res) EXPECT_EQ(r.error, EngineErrorKind::None) << r.error_message;
    return res;
  }

  static void expect_same(const std::vector<Result>& want, const std::vector<Result>& got,
                          const std::string& what) {
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(want[i].sequences.size(), got[i].sequences.size()) << what;
      for (size_t k = 0; k < want[i].sequences.size(); ++k) {
        EXPECT_EQ(want[i].sequences[k].output_ids, got[i].sequences[k].output_ids)
            << what << ": request " << i << " seq " << k;
        EXPECT_EQ(want[i].sequences[k].finish_reason, got[i].sequences[k].finish_reason) << what;
      }
    }
  }

  // Every output that ended (not at max_tokens in a run of whitespace) is a
  // complete object with the schema's keys; most end.
  void expect_valid(const std::vector<Result>& res) const {
    size_t ended = 0, all = 0;
    for (const Result& r : res) all += r.sequences.size();
    for (const Result& r : res)
      for (const SequenceResult& s : r.sequences) {
        const std::string text = tokenizer_->decode(s.output_ids, true);
        if (s.finish_reason != FinishReason::Stop) continue;
        ++ended;
        const json j = json::parse(text);
        EXPECT_TRUE(j.contains("customer_shipping_address") &&
                    j.contains("customer_billing_name") && j.contains("order_id"))
            << text;
      }
    EXPECT_GT(ended * 2, all);
  }

  static Backend* cpu_;
  LoadedModel model_;
  int32_t vocab_ = 0;
  std::unique_ptr<JsonTokenizer> tokenizer_;
  std::unique_ptr<structured::GrammarCompiler> compiler_;
  std::shared_ptr<const TokenConstraintFactory> schema_;
  EngineStats last_;
};

Backend* JumpForwardTest::cpu_ = nullptr;

TEST_P(JumpForwardTest, ForcedKeysAreProposedAndTheOutputsStayExact) {
  const auto reqs = workload(16);
  const auto plain = run(reqs, false);
  const EngineStats off = last_;
  expect_valid(plain);
  EXPECT_EQ(off.jump_forward_tokens, 0u);
  EXPECT_EQ(off.spec_draft_tokens, 0u);
  for (bool async : {true, false}) {
    const std::string what = async ? "async" : "sync";
    expect_same(plain, run(reqs, true, {}, 512, async), what);
    // A key's words have one spelling each, so the mask leaves the model no
    // other choice: every forced token is accepted.
    EXPECT_GT(last_.jump_forward_tokens, 0u) << what;
    EXPECT_EQ(last_.jump_forward_accepted_tokens, last_.jump_forward_tokens) << what;
    EXPECT_LE(last_.jump_forward_tokens, last_.spec_draft_tokens) << what;
  }
  // One request of one sequence at a time: each accepted forced token is a
  // step saved.
  const auto one_by_one = [&](bool jump_forward) {
    std::vector<Result> out;
    EngineStats sum;
    for (const Request& r : reqs) {
      if (r.params.n != 1) {
        out.push_back(plain[out.size()]);
        continue;
      }
      out.push_back(run({r}, jump_forward, {}, 512, false)[0]);
      sum.steps += last_.steps;
      sum.jump_forward_tokens += last_.jump_forward_tokens;
      sum.jump_forward_accepted_tokens += last_.jump_forward_accepted_tokens;
    }
    last_ = sum;
    return out;
  };
  expect_same(plain, one_by_one(false), "one by one");
  const EngineStats alone_off = last_;
  expect_same(plain, one_by_one(true), "one by one, jump-forward");
  std::printf(
      "[%s] one request at a time: %llu steps plain, %llu with jump-forward; %llu forced tokens, "
      "%llu "
      "accepted\n",
      GetParam().c_str(), (unsigned long long)alone_off.steps, (unsigned long long)last_.steps,
      (unsigned long long)last_.jump_forward_tokens,
      (unsigned long long)last_.jump_forward_accepted_tokens);
  EXPECT_GT(last_.jump_forward_accepted_tokens, 0u);
  EXPECT_EQ(alone_off.steps - last_.steps, last_.jump_forward_accepted_tokens);
}

TEST_P(JumpForwardTest, BesideNgramSpeculationAndUnderPreemption) {
  const auto reqs = workload(24);
  const auto plain = run(reqs, false);
  SpeculativeConfig ngram;
  ngram.method = SpeculativeConfig::Method::Ngram;
  ngram.num_tokens = 4;
  expect_same(plain, run(reqs, true, ngram), "with n-gram");
  EXPECT_GT(last_.jump_forward_accepted_tokens, 0u);
  // A pool far too small for 24 sequences of ~100 tokens: preempted and
  // recomputed, drafts dropped with them.
  expect_same(plain, run(reqs, true, {}, 40), "preempted");
  EXPECT_GT(last_.preemptions, 0u);
  EXPECT_GT(last_.jump_forward_accepted_tokens, 0u);
}

TEST_P(JumpForwardTest, ForcedTokensOfTheVocabulary) {
  auto c = schema_->make();
  ASSERT_TRUE(c->jumps_forward());
  std::vector<int32_t> forced;
  // The object's brace is forced, but as the last token of the forced text it
  // is left out: the model may spell it as part of a longer token (`{"`).
  c->forced_tokens(8, forced);
  EXPECT_TRUE(forced.empty());
  ASSERT_TRUE(c->accept_token(tokenizer_->id("{\"")));
  c->forced_tokens(8, forced);
  // The first key in schema order, spelled as the tokenizer cuts it, without
  // its closing quote (whitespace may come before the colon, and the model
  // may spell the quote as part of `":`).
  const std::vector<int32_t> want = {tokenizer_->id("customer"), tokenizer_->id("_shipping"),
                                     tokenizer_->id("_address")};
  EXPECT_EQ(forced, want);
  c->forced_tokens(2, forced);  // at most max_tokens
  EXPECT_EQ(forced, std::vector<int32_t>(want.begin(), want.begin() + 2));
  // The state is unchanged: the key's first token is still what comes next.
  EXPECT_FALSE(c->accept_token(tokenizer_->id("order")));
  EXPECT_TRUE(c->accept_token(tokenizer_->id("customer")));
  // Where the output may end after the forced text, its last token stays.
  auto choice = compiler_->compile(structured::choice_spec({"customer_billing", "order_id"}));
  auto d = choice->make();
  ASSERT_TRUE(d->accept_token(tokenizer_->id("customer")));
  d->forced_tokens(8, forced);
  EXPECT_EQ(forced, std::vector<int32_t>{tokenizer_->id("_billing")});
}

TEST_P(JumpForwardTest, EndlessForcedStringIsBounded) {
  // The grammar forces "ab" forever: the walk stops at its byte bound.
  auto endless = compiler_->compile(structured::ebnf_spec("root ::= \"ab\" root"));
  auto c = endless->make();
  std::vector<int32_t> forced;
  c->forced_tokens(4, forced);
  EXPECT_EQ(forced, std::vector<int32_t>(4, tokenizer_->id("ab")));
  c->forced_tokens(32, forced);
  EXPECT_EQ(forced.size(), 32u);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, JumpForwardTest, ::testing::Values("llama3", "qwen2"));

}  // namespace
}  // namespace loom
