// CUDA Backend::sample_rows against the host reference of the same contract
// (ref::sample_row in tests/backend/reference.h: the same fixed-point masses,
// 64-bit draw and top-p thresholds), so tokens must match exactly: no
// tolerance.
// Also: greedy limits, batch invariance, repeatability, a chi-square test of
// the draw, argument checks, and a timing print (256 specs x 128256 vocab).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

#include "../backend/reference.h"
#include "cuda_test_util.h"

namespace loom {
namespace {

using namespace cudatest;
using ref::random_logits;
using ref::random_specs;

constexpr float kInf = std::numeric_limits<float>::infinity();

Tensor gpu_logits(Backend& gpu, DType t, const std::vector<float>& v, int64_t rows, int64_t vocab) {
  if (t == DType::BF16) return gpu_bf16(gpu, v, {rows, vocab});
  if (t == DType::F32) return gpu_f32(gpu, v, {rows, vocab});
  Tensor h = gpu.alloc(DType::F16, {rows, vocab});
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = f32_to_f16(v[i]);
  gpu.copy_from_host(h, bits.data(), bits.size() * 2);
  return h;
}

class CudaSamplingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LOOM_REQUIRE_GPU();
    gpu_ = make_cuda_backend(0);
  }

  std::vector<int32_t> sample(const Tensor& logits, const std::vector<SampleSpec>& specs,
                              const std::vector<LogitEdit>& edits) {
    std::vector<int32_t> out;
    EXPECT_TRUE(gpu_->sample_rows(logits, specs, edits, out));
    EXPECT_EQ(out.size(), specs.size());
    return out;
  }

  std::unique_ptr<Backend> gpu_;
};

TEST_F(CudaSamplingTest, GreedyLimitsGiveTheArgmax) {
  std::mt19937_64 rng(1);
  for (int64_t vocab : {1, 7, 1000, 32000, 151936}) {
    SCOPED_TRACE(vocab);
    const int64_t rows = 6;
    auto v = random_logits(rows, vocab, rng);
    for (float& x : v)  // several +inf would all be kept by min-p (equal maxima)
      if (x == kInf) x = 0.0f;
    const Tensor t = gpu_logits(*gpu_, DType::BF16, v, rows, vocab);
    std::vector<int32_t> argmax;
    gpu_->argmax_rows(t, argmax);
    std::vector<SampleSpec> specs;
    for (int32_t r = 0; r < rows; ++r)
      for (int mode = 0; mode < 4; ++mode) {
        SampleSpec sp;
        sp.row = r;
        sp.temperature = 0.7f;
        sp.uniform = (mode + 0.5) / 4;
        if (mode == 0) sp.top_k = 1;
        if (mode == 1) sp.top_p = 0.0f;
        if (mode == 2) sp.top_p = 1e-9f;
        if (mode == 3) sp.min_p = 1.5f;  // nothing passes: the best token alone
        specs.push_back(sp);
      }
    const auto got = sample(t, specs, {});
    for (size_t i = 0; i < specs.size(); ++i) {
      const float* row = v.data() + specs[i].row * vocab;
      // argmax_rows skips only NaNs: compare where the row's best is a candidate.
      const bool any = std::any_of(row, row + vocab, [](float x) { return x > -kInf; });
      EXPECT_EQ(got[i], any ? argmax[specs[i].row] : 0) << "spec " << i;
    }
  }
}

TEST_F(CudaSamplingTest, MatchesHostReference) {
  std::mt19937_64 rng(7);
  struct Case {
    int64_t vocab, rows;
    size_t specs;
    DType type;
  };
  const Case cases[] = {
      {1, 3, 64, DType::BF16},       {7, 16, 1000, DType::BF16},  {7, 5, 200, DType::F32},
      {1000, 32, 1024, DType::BF16}, {1000, 8, 300, DType::F16},  {1001, 8, 300, DType::F32},
      {32000, 24, 600, DType::BF16}, {32000, 4, 100, DType::F32}, {151936, 8, 200, DType::BF16},
      {262144, 6, 120, DType::BF16}, {128256, 4, 60, DType::F16}};
  size_t checked = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "vocab " << c.vocab << " " << dtype_name(c.type));
    auto v = random_logits(c.rows, c.vocab, rng);
    if (c.type == DType::F16)  // what the GPU will hold (tiny values lose bits as f16 subnormals)
      for (float& x : v) x = f16_to_f32(f32_to_f16(x));
    const Tensor t = gpu_logits(*gpu_, c.type, v, c.rows, c.vocab);
    std::vector<LogitEdit> edits;
    const auto specs = random_specs(c.specs, c.rows, c.vocab, rng, edits);
    const auto got = sample(t, specs, edits);
    int bad = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      const ref::SampleResult want =
          ref::sample_row(v.data() + specs[i].row * c.vocab, c.vocab, specs[i], edits);
      if (got[i] != want.token && bad++ < 5) {
        const SampleSpec& sp = specs[i];
        ADD_FAILURE() << "spec " << i << " row " << sp.row << " t " << sp.temperature << " k "
                      << sp.top_k << " p " << sp.top_p << " min_p " << sp.min_p << " u "
                      << sp.uniform << " edits " << sp.edits_end - sp.edits_begin << " kept "
                      << want.kept.size() << ": got " << got[i] << " want " << want.token;
      }
      ++checked;
    }
    EXPECT_EQ(bad, 0);
  }
  std::printf("sample_rows: %zu specs checked against the host reference\n", checked);
}

TEST_F(CudaSamplingTest, BatchInvariantAndRepeatable) {
  std::mt19937_64 rng(11);
  const int64_t vocab = 32000, rows = 40;
  const auto v = random_logits(rows, vocab, rng);
  const Tensor t = gpu_logits(*gpu_, DType::BF16, v, rows, vocab);
  std::vector<LogitEdit> edits;
  const auto batch = random_specs(300, rows, vocab, rng, edits);
  const auto all = sample(t, batch, edits);
  EXPECT_EQ(sample(t, batch, edits), all);  // repeated call
  // Reversed batch: each spec's token moves with it.
  std::vector<SampleSpec> rev(batch.rbegin(), batch.rend());
  auto got_rev = sample(t, rev, edits);
  std::reverse(got_rev.begin(), got_rev.end());
  EXPECT_EQ(got_rev, all);
  // Each of a few specs alone (its edits copied to the front).
  for (size_t i : {size_t{0}, size_t{17}, size_t{137}, size_t{299}}) {
    SampleSpec one = batch[i];
    std::vector<LogitEdit> own(edits.begin() + one.edits_begin, edits.begin() + one.edits_end);
    one.edits_begin = 0;
    one.edits_end = static_cast<int32_t>(own.size());
    EXPECT_EQ(sample(t, {one}, own)[0], all[i]) << "spec " << i;
  }
  // Several specs sharing one row and one edit range (n > 1).
  std::vector<SampleSpec> shared(50, batch[5]);
  for (size_t i = 0; i < shared.size(); ++i)
    shared[i].uniform = (static_cast<double>(i) + 0.5) / 50;
  const auto got_shared = sample(t, shared, edits);
  for (size_t i = 0; i < shared.size(); ++i)
    EXPECT_EQ(got_shared[i],
              ref::sample_row(v.data() + shared[i].row * vocab, vocab, shared[i], edits).token);
}

// Empirical frequencies over many uniforms against the kept set's probabilities.
TEST_F(CudaSamplingTest, ChiSquareOfTheDraw) {
  std::mt19937_64 rng(3);
  const int64_t vocab = 200;
  std::vector<float> v(static_cast<size_t>(vocab));
  std::normal_distribution<float> normal(0.0f, 1.5f);
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(normal(rng)));
  const Tensor t = gpu_logits(*gpu_, DType::BF16, v, 1, vocab);
  SampleSpec base;
  base.temperature = 0.9f;
  base.top_k = 60;
  base.top_p = 0.9f;
  base.min_p = 0.02f;
  const ref::SampleResult want = ref::sample_row(v.data(), vocab, base, {});
  ASSERT_GT(want.kept.size(), 5u);
  const int kDraws = 200000, kPerCall = 1000;
  std::vector<int64_t> counts(static_cast<size_t>(vocab), 0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<SampleSpec> specs(kPerCall, base);
  for (int done = 0; done < kDraws; done += kPerCall) {
    for (SampleSpec& sp : specs) sp.uniform = unit(rng);
    for (int32_t tok : sample(t, specs, {})) ++counts[static_cast<size_t>(tok)];
  }
  double total = 0;
  for (uint64_t m : want.mass) total += static_cast<double>(m);
  double chi2 = 0;
  int64_t in_kept = 0;
  for (size_t i = 0; i < want.kept.size(); ++i) {
    const double expect = kDraws * static_cast<double>(want.mass[i]) / total;
    const double obs = static_cast<double>(counts[static_cast<size_t>(want.kept[i])]);
    chi2 += (obs - expect) * (obs - expect) / expect;
    in_kept += counts[static_cast<size_t>(want.kept[i])];
  }
  EXPECT_EQ(in_kept, kDraws) << "tokens drawn outside the kept set";
  const double dof = static_cast<double>(want.kept.size() - 1);
  // Mean dof, sd sqrt(2 dof): 6 sd is far in the tail (the seed is fixed anyway).
  EXPECT_LT(chi2, dof + 6 * std::sqrt(2 * dof)) << "kept " << want.kept.size();
  std::printf("sample_rows chi-square: %.1f over %.0f degrees of freedom (%zu kept)\n", chi2, dof,
              want.kept.size());
}

TEST_F(CudaSamplingTest, EdgeCasesAndChecks) {
  const int64_t vocab = 100;
  std::vector<float> v(static_cast<size_t>(2 * vocab), 1.0f);  // row 0: all equal
  for (int64_t i = 0; i < vocab; ++i) v[static_cast<size_t>(vocab + i)] = -kInf;
  const Tensor t = gpu_logits(*gpu_, DType::BF16, v, 2, vocab);
  std::vector<int32_t> out;
  EXPECT_TRUE(gpu_->sample_rows(t, {}, {}, out));
  EXPECT_TRUE(out.empty());
  // Equal logits: top-k keeps the lowest ids; the draw walks them in id order.
  SampleSpec sp;
  sp.top_k = 10;
  sp.uniform = 0.95;
  EXPECT_EQ(sample(t, {sp}, {})[0], 9);
  sp.top_k = 0;
  sp.top_p = 0.25f;  // 25 of 100 equal tokens
  EXPECT_EQ(sample(t, {sp}, {})[0], 23);
  // Everything banned or -inf: token 0.
  SampleSpec none;
  none.row = 1;
  EXPECT_EQ(sample(t, {none}, {})[0], 0);
  std::vector<LogitEdit> ban_all(static_cast<size_t>(vocab));
  for (int32_t i = 0; i < vocab; ++i)
    ban_all[static_cast<size_t>(i)] = LogitEdit{i, 1.0f, 0.0f, 0.0f, true};
  SampleSpec banned;
  banned.edits_end = static_cast<int32_t>(vocab);
  EXPECT_EQ(sample(t, {banned}, ban_all)[0], 0);
  // A bias lifting a -inf token makes it the only candidate.
  SampleSpec lifted;
  lifted.row = 1;
  lifted.edits_end = 1;
  EXPECT_EQ(sample(t, {lifted}, {LogitEdit{42, 1.0f, 0.0f, 5.0f, false}})[0],
            0);  // -inf + 5 is -inf
  // Bad arguments throw.
  SampleSpec bad_row;
  bad_row.row = 2;
  EXPECT_THROW(gpu_->sample_rows(t, {bad_row}, {}, out), Error);
  SampleSpec bad_t;
  bad_t.temperature = 0.0f;
  EXPECT_THROW(gpu_->sample_rows(t, {bad_t}, {}, out), Error);
  SampleSpec dup;
  dup.edits_end = 2;
  EXPECT_THROW(gpu_->sample_rows(t, {dup}, {LogitEdit{3}, LogitEdit{3}}, out), Error);
  SampleSpec range;
  range.edits_end = 1;
  EXPECT_THROW(gpu_->sample_rows(t, {range}, {LogitEdit{100}}, out), Error);
  EXPECT_THROW(gpu_->sample_rows(t, {range}, {}, out), Error);
}

TEST_F(CudaSamplingTest, TimingPrint) {
  std::mt19937_64 rng(5);
  const int64_t vocab = 128256, n = 256;
  std::vector<float> v(static_cast<size_t>(n * vocab));
  std::normal_distribution<float> normal(0.0f, 2.5f);
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(normal(rng)));
  const Tensor t = gpu_logits(*gpu_, DType::BF16, v, n, vocab);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  struct Setting {
    const char* name;
    int32_t top_k;
    float top_p, min_p;
    int edits;
  };
  const Setting settings[] = {{"temperature only", 0, 1.0f, 0.0f, 0},
                              {"top_k 50, top_p 0.95", 50, 0.95f, 0.0f, 0},
                              {"top_p 0.95", 0, 0.95f, 0.0f, 0},
                              {"top_k 50, top_p 0.9, min_p 0.05, 512 edits", 50, 0.9f, 0.05f, 512}};
  for (const Setting& st : settings) {
    std::vector<LogitEdit> edits;
    std::vector<SampleSpec> specs(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) {
      SampleSpec& sp = specs[static_cast<size_t>(i)];
      sp.row = i;
      sp.temperature = 0.8f;
      sp.top_k = st.top_k;
      sp.top_p = st.top_p;
      sp.min_p = st.min_p;
      sp.uniform = unit(rng);
      sp.edits_begin = static_cast<int32_t>(edits.size());
      for (int e = 0; e < st.edits; ++e)
        edits.push_back(
            LogitEdit{static_cast<int32_t>((e * 251 + i) % vocab), 1.2f, 0.5f, 0.0f, false});
      sp.edits_end = static_cast<int32_t>(edits.size());
    }
    std::vector<int32_t> out;
    for (int i = 0; i < 3; ++i) gpu_->sample_rows(t, specs, edits, out);
    const int kIters = 20;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kIters; ++i) gpu_->sample_rows(t, specs, edits, out);
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count() /
        kIters;
    std::printf(
        "sample_rows %lld x %lld bf16, %s: %.1f us per call (incl. upload, copy back, sync)\n",
        static_cast<long long>(n), static_cast<long long>(vocab), st.name, us);
  }
}

}  // namespace
}  // namespace loom
