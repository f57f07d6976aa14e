// The real default GGUF models (scripts/fetch_model.sh) against HF
// transformers (tests/fixtures/real/*.json, made by
// scripts/make_real_model_fixtures.py): per prompt, loom's greedy tokens equal
// HF's up to HF's first near-tie, teacher-forced along HF's greedy sequence
// loom's top-2 margins stay close and its argmax agrees wherever HF's is clear,
// and at the last prompt position loom's logits of HF's top-20 tokens are close
// to HF's. Skips when a model file is absent or is not the fixture's. Takes
// ~25 s on 2 cores; the `slow` ctest label keeps it out of sanitizer runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"
#include "model/transformer.h"
#include "../common/paged_step.h"

namespace loom {
namespace {

// HF runs the GGUF dequantised to fp32; loom quantises activations to 8 bits
// for its integer dot products (llama.cpp style), so logits differ by a
// model-dependent amount. Tolerances per model, from measurements on these
// fixtures (loom, AVX-512, 2 threads; llama.cpp 0.3.36 via llama-cpp-python on
// the same files, in brackets, for scale):
//   qwen2.5-coder-0.5b: |dlogit| over HF's top-20 at the last prompt position
//     <= 0.22 (0.19); |dmargin| (top-1 minus top-2, teacher-forced) <= 0.19 (0.30)
//   gemma3-270m: |dlogit| <= 0.37 (0.72); |dmargin| <= 0.46 (0.73). Gemma's
//     logits at confident teacher-forced steps (top-1 ~ 25+) shift by up to
//     2.2 (1.2) with the margin nearly kept, so only margins are checked there.
// A tolerance is about twice the measured worst case.
struct RealModelCase {
  const char* name;        // scripts/fetch_model.sh NAME; fixture tests/fixtures/real/NAME.json
  float logit_tolerance;   // |loom - HF| over HF's top-20 at the last prompt position
  float margin_tolerance;  // |loom margin - HF margin| along HF's greedy sequence; also
                           // the HF margin below which a step is a near-tie either way
};
const RealModelCase kCases[] = {
    {"qwen2.5-coder-0.5b", 0.5f, 0.4f},
    {"gemma3-270m", 1.0f, 1.0f},
};
// A prompt with expect_text (Qwen's Paris) must match HF for at least this many
// tokens even across near-ties: HF's margins at its steps 1 and 2 are only
// 0.08 and 0.07, so a kernel change may legitimately flip them; this pins
// today's behaviour (verified identical to HF for all 24 tokens).
constexpr size_t kExpectTextTokens = 8;
constexpr int64_t kBlockSize = 16;

struct RealPrompt {
  std::string name;
  std::vector<int32_t> prompt;
  std::vector<int32_t> greedy;
  std::vector<std::string> greedy_pieces;
  std::vector<float> margins;  // HF top-1 minus top-2 at each generated position
  std::vector<std::vector<int32_t>> forced_top2_ids;  // [generated position][2], teacher-forced
  std::vector<std::vector<float>> forced_top2_logits;
  std::vector<int32_t> last_top_ids;
  std::vector<float> last_top_logits;
  std::string expect_text;  // loom's matched tokens must spell this, if set
};

struct RealFixture {
  std::string file;
  uint64_t size = 0;
  std::vector<std::pair<uint64_t, std::string>> probes;  // (offset, hex bytes)
  std::vector<RealPrompt> prompts;
};

RealFixture load_fixture(const std::string& model) {
  const std::string path = std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/real/" + model + ".json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("missing fixture " + path);
  const nlohmann::json j = nlohmann::json::parse(in);
  RealFixture f;
  f.file = j.at("file").get<std::string>();
  f.size = j.at("size").get<uint64_t>();
  for (const auto& p : j.at("probes")) f.probes.emplace_back(p.at("offset").get<uint64_t>(), p.at("hex").get<std::string>());
  for (const auto& p : j.at("prompts")) {
    RealPrompt r;
    r.name = p.at("name").get<std::string>();
    r.prompt = p.at("prompt").get<std::vector<int32_t>>();
    r.greedy = p.at("greedy").get<std::vector<int32_t>>();
    r.greedy_pieces = p.at("greedy_pieces").get<std::vector<std::string>>();
    r.margins = p.at("margins").get<std::vector<float>>();
    r.forced_top2_ids = p.at("forced_top2_ids").get<std::vector<std::vector<int32_t>>>();
    r.forced_top2_logits = p.at("forced_top2_logits").get<std::vector<std::vector<float>>>();
    r.last_top_ids = p.at("last_top_ids").get<std::vector<int32_t>>();
    r.last_top_logits = p.at("last_top_logits").get<std::vector<float>>();
    r.expect_text = p.value("expect_text", "");
    f.prompts.push_back(std::move(r));
  }
  return f;
}

std::string models_dir() {
  const char* env = std::getenv("LOOM_MODELS_DIR");  // as scripts/fetch_model.sh
  return env && *env ? env : std::string(LOOM_SOURCE_DIR) + "/models";
}

// Why the file at `path` is not the fixture's model, or nothing. Size plus a
// few 32-byte samples stand in for the SHA-256 (hashing 500 MB per run is slow).
std::optional<std::string> identity_mismatch(const std::string& path, const RealFixture& f) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec || size != f.size) return "size " + std::to_string(size) + " != fixture's " + std::to_string(f.size);
  std::ifstream in(path, std::ios::binary);
  for (const auto& [offset, hex] : f.probes) {
    std::string bytes(hex.size() / 2, '\0');
    in.seekg(static_cast<std::streamoff>(offset));
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    std::string got;
    char buf[3];
    for (unsigned char c : bytes) {
      std::snprintf(buf, sizeof buf, "%02x", c);
      got += buf;
    }
    if (!in || got != hex) return "bytes at offset " + std::to_string(offset) + " differ";
  }
  return std::nullopt;
}

// What loom produced for one prompt.
struct PromptRun {
  std::vector<float> last_logits;  // whole vocab, at the last prompt position
  std::vector<int32_t> generated;  // greedy, as many tokens as HF's
  // Teacher-forced along HF's greedy sequence, per generated position: loom's
  // argmax and its logits of HF's top-2 tokens there.
  std::vector<int32_t> forced_argmax;
  std::vector<std::vector<float>> forced_top2_logits;
};

// Prefill in one step, then one decode step per token; separately, one step
// over the prompt plus HF's greedy tokens (teacher forcing).
PromptRun run_prompt(Transformer& model, const RealPrompt& p) {
  const auto max_len = static_cast<int64_t>(p.prompt.size() + p.greedy.size());
  const int64_t num_blocks = (max_len + kBlockSize - 1) / kBlockSize + 1;
  const auto last = static_cast<int32_t>(p.prompt.size()) - 1;
  PromptRun run;
  {
    KvCache cache = model.allocate_kv_cache(num_blocks, kBlockSize, DType::F32);
    testing::ShuffledBlockPool pool(num_blocks, 17);
    testing::PagedSequence seq;
    StepInput step = testing::make_paged_step({{&seq, p.prompt}}, pool, kBlockSize);
    step.logit_rows = {last};
    run.last_logits = testing::logits_to_rows(model.backend(), model.forward(step, cache))[0];
    int32_t next = testing::argmax(run.last_logits);
    while (true) {
      run.generated.push_back(next);
      if (run.generated.size() == p.greedy.size()) break;
      StepInput decode = testing::make_paged_step({{&seq, {next}}}, pool, kBlockSize);
      next = testing::argmax(testing::logits_to_rows(model.backend(), model.forward(decode, cache))[0]);
    }
  }
  KvCache cache = model.allocate_kv_cache(num_blocks, kBlockSize, DType::F32);
  testing::ShuffledBlockPool pool(num_blocks, 29);
  testing::PagedSequence seq;
  std::vector<int32_t> forced = p.prompt;
  forced.insert(forced.end(), p.greedy.begin(), p.greedy.end() - 1);
  StepInput step = testing::make_paged_step({{&seq, forced}}, pool, kBlockSize);
  step.logit_rows.clear();
  for (int32_t i = 0; i < static_cast<int32_t>(p.greedy.size()); ++i) step.logit_rows.push_back(last + i);
  const auto rows = testing::logits_to_rows(model.backend(), model.forward(step, cache));
  for (size_t i = 0; i < rows.size(); ++i) {
    run.forced_argmax.push_back(testing::argmax(rows[i]));
    run.forced_top2_logits.push_back({rows[i].at(static_cast<size_t>(p.forced_top2_ids[i][0])),
                                      rows[i].at(static_cast<size_t>(p.forced_top2_ids[i][1]))});
  }
  return run;
}

class RealModelTest : public ::testing::TestWithParam<RealModelCase> {
 protected:
  static void SetUpTestSuite() { backend_ = make_cpu_backend(2).release(); }
  static void TearDownTestSuite() {
    runs().clear();
    delete backend_;
    backend_ = nullptr;
  }

  // Runs every prompt of the model once; the tests share the results.
  void SetUp() override {
    name_ = GetParam().name;
    fixture_ = load_fixture(name_);
    const std::string path = models_dir() + "/" + fixture_.file;
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent: run scripts/fetch_model.sh " << name_;
    if (auto why = identity_mismatch(path, fixture_))
      GTEST_SKIP() << path << " is not the fixture's model (" << *why << "): run scripts/fetch_model.sh " << name_
                   << " or scripts/make_real_model_fixtures.py";
    auto& cached = runs()[name_];
    if (cached.empty()) {
      const LoadedModel loaded = open_model(path);
      Transformer model(loaded.config, *loaded.weights, *backend_);
      for (const auto& p : fixture_.prompts) cached.push_back(run_prompt(model, p));
    }
    runs_ = &cached;
  }

  static std::map<std::string, std::vector<PromptRun>>& runs() {
    static std::map<std::string, std::vector<PromptRun>> r;
    return r;
  }

  static Backend* backend_;
  std::string name_;
  RealFixture fixture_;
  const std::vector<PromptRun>* runs_ = nullptr;
};

Backend* RealModelTest::backend_ = nullptr;

TEST_P(RealModelTest, LastPromptLogitsMatchHf) {
  float worst = 0;
  for (size_t i = 0; i < fixture_.prompts.size(); ++i) {
    const RealPrompt& p = fixture_.prompts[i];
    const std::vector<float>& logits = (*runs_)[i].last_logits;
    float d = 0;
    for (size_t k = 0; k < p.last_top_ids.size(); ++k)
      d = std::max(d, std::fabs(logits.at(static_cast<size_t>(p.last_top_ids[k])) - p.last_top_logits[k]));
    worst = std::max(worst, d);
    std::printf("%s/%s: max |dlogit| over HF top-%zu = %.4f\n", name_.c_str(), p.name.c_str(),
                p.last_top_ids.size(), d);
    EXPECT_LE(d, GetParam().logit_tolerance) << p.name;
    if (p.margins[0] >= GetParam().margin_tolerance) {
      EXPECT_EQ(testing::argmax(logits), p.last_top_ids[0]) << p.name;
    }
  }
  std::printf("%s: max |dlogit| over all prompts = %.4f\n", name_.c_str(), worst);
}

// Along HF's own greedy sequence: loom's top-2 margin (over HF's top-2 tokens)
// stays within tolerance of HF's and loom picks HF's token wherever HF's
// choice is clear. |dlogit| is printed, not checked (see the tolerances).
TEST_P(RealModelTest, TeacherForcedMatchesHf) {
  for (size_t i = 0; i < fixture_.prompts.size(); ++i) {
    const RealPrompt& p = fixture_.prompts[i];
    const PromptRun& run = (*runs_)[i];
    float d = 0, d_margin = 0;
    for (size_t t = 0; t < p.greedy.size(); ++t) {
      const std::vector<float>& loom = run.forced_top2_logits[t];
      const std::vector<float>& hf = p.forced_top2_logits[t];
      d = std::max({d, std::fabs(loom[0] - hf[0]), std::fabs(loom[1] - hf[1])});
      d_margin = std::max(d_margin, std::fabs((loom[0] - loom[1]) - p.margins[t]));
      if (p.margins[t] >= GetParam().margin_tolerance) {
        EXPECT_EQ(run.forced_argmax[t], p.greedy[t]) << p.name << " position " << t << ", HF margin " << p.margins[t];
      }
    }
    std::printf("%s/%s: teacher-forced max |dlogit| (HF top-2) = %.4f, max |dmargin| = %.4f\n", name_.c_str(),
                p.name.c_str(), d, d_margin);
    EXPECT_LE(d_margin, GetParam().margin_tolerance) << p.name;
  }
}

TEST_P(RealModelTest, GreedyMatchesHfWhileClear) {
  for (size_t i = 0; i < fixture_.prompts.size(); ++i) {
    const RealPrompt& p = fixture_.prompts[i];
    const std::vector<int32_t>& got = (*runs_)[i].generated;
    size_t matched = 0;
    while (matched < got.size() && got[matched] == p.greedy[matched]) ++matched;
    size_t clear = 0;  // HF steps before the first near-tie
    while (clear < p.margins.size() && p.margins[clear] >= GetParam().margin_tolerance) ++clear;
    std::printf("%s/%s: %zu/%zu greedy tokens match HF (first near-tie at %zu)\n", name_.c_str(),
                p.name.c_str(), matched, p.greedy.size(), clear);
    EXPECT_GE(matched, clear) << p.name << ": loom diverges from HF at token " << matched
                              << " although HF's top-2 margin there is " << p.margins[matched];
    if (!p.expect_text.empty()) {
      EXPECT_GE(matched, kExpectTextTokens) << p.name;
      std::string text;
      for (size_t t = 0; t < matched; ++t) text += p.greedy_pieces[t];
      EXPECT_NE(text.find(p.expect_text), std::string::npos) << text;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RealModels, RealModelTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           std::replace_if(n.begin(), n.end(), [](char c) { return !std::isalnum(c); }, '_');
                           return n;
                         });

}  // namespace
}  // namespace loom
