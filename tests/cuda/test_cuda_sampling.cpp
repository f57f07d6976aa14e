// CUDA Backend::sample_rows against a host reference of the same contract
// (backend.h), written the obvious way: edit, scale, sort candidates by (value
// desc, id asc), cut top-k / top-p / min-p, walk the kept ids in order. Both
// use the same fixed-point masses (round(exp(x - max) * 2^32), an exp built of
// correctly rounded f32 operations) and the same 64-bit draw and top-p
// thresholds, so tokens must match exactly: no tolerance.
// Also: greedy limits, batch invariance, repeatability, a chi-square test of
// the draw, argument checks, and a timing print (256 specs x 128256 vocab).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

#include "cuda_test_util.h"

namespace loom {
namespace {

using namespace cudatest;

constexpr float kInf = std::numeric_limits<float>::infinity();

// round(exp(x - mx) * 2^32), as the kernel computes it (sample_rows.cu).
uint64_t ref_mass(float x, float mx) {
  const float d = x - mx;
  if (!(d >= -24.0f)) return 0;
  const float kf = std::rint(d * 0x1.715476p+0f);
  float r = std::fma(kf, -0x1.62e4p-1f, d);
  r = std::fma(kf, -0x1.7f7d1cp-20f, r);
  float p = 0x1.6c16c2p-10f;
  p = std::fma(p, r, 0x1.111112p-7f);
  p = std::fma(p, r, 0x1.555556p-5f);
  p = std::fma(p, r, 0x1.555556p-3f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  const uint64_t q = static_cast<uint64_t>(p * 16777216.0f);
  const int s = -(8 + static_cast<int>(kf));
  if (s <= 0) return q << -s;
  return (q + (uint64_t{1} << (s - 1))) >> s;
}

uint64_t fixed64(double f) {
  if (!(f > 0)) return 0;
  if (f >= 1) return UINT64_MAX;
  return static_cast<uint64_t>(std::ldexp(f, 64));
}

uint64_t mul_hi(uint64_t a, uint64_t b) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
}

// x after the spec's edits and temperature (+inf as the largest float, -0 as +0).
std::vector<float> processed_row(const float* row, int64_t vocab, const SampleSpec& sp,
                                 const std::vector<LogitEdit>& edits) {
  const float inv_t = 1.0f / sp.temperature;
  std::vector<float> x(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) x[i] = row[i] * inv_t;
  for (int32_t e = sp.edits_begin; e < sp.edits_end; ++e) {
    const LogitEdit& ed = edits[e];
    float v = row[ed.token];
    if (ed.rep != 1.0f) v = v > 0.0f ? v / ed.rep : v * ed.rep;
    v = v - ed.sub;
    v = v + ed.add;
    if (ed.ban) v = -kInf;
    x[ed.token] = v * inv_t;
  }
  for (float& v : x) {
    if (v == kInf) v = std::numeric_limits<float>::max();
    if (v == 0.0f) v = 0.0f;
  }
  return x;
}

struct RefResult {
  int32_t token = 0;
  std::vector<int32_t> kept;  // ids, increasing
  std::vector<uint64_t> mass;
};

RefResult reference_sample(const float* row, int64_t vocab, const SampleSpec& sp,
                           const std::vector<LogitEdit>& edits) {
  const std::vector<float> x = processed_row(row, vocab, sp, edits);
  std::vector<int32_t> order;
  for (int32_t i = 0; i < vocab; ++i)
    if (x[i] > -kInf) order.push_back(i);
  RefResult res;
  if (order.empty()) return res;
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return x[a] != x[b] ? x[a] > x[b] : a < b; });
  const float mx = x[order[0]];
  size_t keep = order.size();
  if (sp.top_k > 0 && static_cast<size_t>(sp.top_k) < keep) keep = static_cast<size_t>(sp.top_k);
  if (sp.top_p < 1.0f) {
    uint64_t z = 0;
    for (size_t i = 0; i < keep; ++i) z += ref_mass(x[order[i]], mx);
    const unsigned __int128 prod = static_cast<unsigned __int128>(fixed64(sp.top_p)) * z;
    const uint64_t t =
        static_cast<uint64_t>(prod >> 64) + (static_cast<uint64_t>(prod) != 0 ? 1 : 0);
    if (t == 0) {
      keep = 1;
    } else {
      uint64_t cum = 0;
      for (size_t i = 0; i < keep; ++i) {
        cum += ref_mass(x[order[i]], mx);
        if (cum >= t) {
          keep = i + 1;
          break;
        }
      }
    }
  }
  if (sp.min_p > 0.0f) {
    const float cut = mx + std::log(sp.min_p);
    size_t pass = 0;
    while (pass < keep && x[order[pass]] >= cut) ++pass;
    keep = std::max<size_t>(1, pass);
  }
  res.kept.assign(order.begin(), order.begin() + static_cast<long>(keep));
  std::sort(res.kept.begin(), res.kept.end());
  uint64_t total = 0;
  for (int32_t id : res.kept) {
    res.mass.push_back(ref_mass(x[id], mx));
    total += res.mass.back();
  }
  const uint64_t target = mul_hi(fixed64(sp.uniform), total);
  uint64_t cum = 0;
  res.token = res.kept.back();
  for (size_t i = 0; i < res.kept.size(); ++i) {
    cum += res.mass[i];
    if (target < cum) {
      res.token = res.kept[i];
      break;
    }
  }
  return res;
}

// Logits rows of a given flavour, rounded to bf16 (so every dtype sees them exactly).
std::vector<float> random_logits(int64_t rows, int64_t vocab, std::mt19937_64& rng) {
  std::vector<float> v(static_cast<size_t>(rows * vocab));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int64_t r = 0; r < rows; ++r) {
    const int kind = static_cast<int>(rng() % 5);
    const float scale = kind == 0 ? 0.5f : kind == 1 ? 3.0f : 8.0f;
    for (int64_t i = 0; i < vocab; ++i) {
      float x = normal(rng) * scale;
      if (kind == 3) x = std::round(x * 0.5f);  // many ties
      if (kind == 4) x = std::round(x / 4.0f);  // massive ties (few distinct values)
      const double u = unit(rng);
      if (u < 0.02)
        x = -kInf;
      else if (u < 0.03)
        x = std::numeric_limits<float>::quiet_NaN();
      else if (u < 0.0301 && kind == 2)
        x = kInf;
      v[static_cast<size_t>(r * vocab + i)] = bf16_to_f32(f32_to_bf16(x));
    }
    if (rng() % 23 == 0)  // a row with no candidate
      for (int64_t i = 0; i < vocab; ++i)
        v[static_cast<size_t>(r * vocab + i)] =
            i % 2 ? -kInf : std::numeric_limits<float>::quiet_NaN();
  }
  return v;
}

// Random specs over rows [0, rows), with their edits appended to `edits`.
std::vector<SampleSpec> random_specs(size_t n, int64_t rows, int64_t vocab, std::mt19937_64& rng,
                                     std::vector<LogitEdit>& edits) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const float temps[] = {0.25f, 0.7f, 1.0f, 1.3f, 3.0f};
  const int32_t ks[] = {
      0, 0, 1, 2, 5, 40, 1000, static_cast<int32_t>(vocab), static_cast<int32_t>(vocab + 3)};
  const float ps[] = {1.0f, 1.0f, 0.95f, 0.9f, 0.5f, 0.3f, 1e-7f, 0.0f, 0.999f};
  const float mps[] = {0.0f, 0.0f, 0.0f, 0.05f, 0.3f, 1.0f, 2.0f};
  std::vector<SampleSpec> specs(n);
  std::vector<int32_t> perm(static_cast<size_t>(vocab));
  std::iota(perm.begin(), perm.end(), 0);
  for (SampleSpec& sp : specs) {
    sp.row = static_cast<int32_t>(rng() % static_cast<uint64_t>(rows));
    sp.temperature = temps[rng() % std::size(temps)];
    sp.top_k = ks[rng() % std::size(ks)];
    sp.top_p = ps[rng() % std::size(ps)];
    if (rng() % 4 == 0) sp.top_p = static_cast<float>(unit(rng));
    sp.min_p = mps[rng() % std::size(mps)];
    const uint64_t w = rng() % 16;
    sp.uniform = w == 0 ? 0.0 : w == 1 ? 1.0 - 0x1p-53 : unit(rng);
    sp.edits_begin = static_cast<int32_t>(edits.size());
    if (rng() % 2) {
      const size_t ne = std::min<size_t>(static_cast<size_t>(vocab), rng() % 300);
      for (size_t i = 0; i < ne; ++i) std::swap(perm[i], perm[i + rng() % (perm.size() - i)]);
      for (size_t i = 0; i < ne; ++i) {
        LogitEdit e;
        e.token = perm[i];
        const int kind = static_cast<int>(rng() % 6);
        if (kind == 0) e.rep = 1.3f;
        if (kind == 1) e.sub = 0.4f + 0.5f * static_cast<float>(rng() % 4);
        if (kind == 2) e.add = static_cast<float>(static_cast<int>(rng() % 21) - 10);
        if (kind == 3) e.ban = true;
        if (kind == 4) e.rep = 1.1f, e.sub = 0.7f, e.add = 2.0f;
        if (kind == 5) e.add = 100.0f;  // logit_bias forcing a token
        edits.push_back(e);
      }
    }
    sp.edits_end = static_cast<int32_t>(edits.size());
  }
  return specs;
}

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
      const RefResult want =
          reference_sample(v.data() + specs[i].row * c.vocab, c.vocab, specs[i], edits);
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
              reference_sample(v.data() + shared[i].row * vocab, vocab, shared[i], edits).token);
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
  const RefResult ref = reference_sample(v.data(), vocab, base, {});
  ASSERT_GT(ref.kept.size(), 5u);
  const int kDraws = 200000, kPerCall = 1000;
  std::vector<int64_t> counts(static_cast<size_t>(vocab), 0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<SampleSpec> specs(kPerCall, base);
  for (int done = 0; done < kDraws; done += kPerCall) {
    for (SampleSpec& sp : specs) sp.uniform = unit(rng);
    for (int32_t tok : sample(t, specs, {})) ++counts[static_cast<size_t>(tok)];
  }
  double total = 0;
  for (uint64_t m : ref.mass) total += static_cast<double>(m);
  double chi2 = 0;
  int64_t in_kept = 0;
  for (size_t i = 0; i < ref.kept.size(); ++i) {
    const double expect = kDraws * static_cast<double>(ref.mass[i]) / total;
    const double obs = static_cast<double>(counts[static_cast<size_t>(ref.kept[i])]);
    chi2 += (obs - expect) * (obs - expect) / expect;
    in_kept += counts[static_cast<size_t>(ref.kept[i])];
  }
  EXPECT_EQ(in_kept, kDraws) << "tokens drawn outside the kept set";
  const double dof = static_cast<double>(ref.kept.size() - 1);
  // Mean dof, sd sqrt(2 dof): 6 sd is far in the tail (the seed is fixed anyway).
  EXPECT_LT(chi2, dof + 6 * std::sqrt(2 * dof)) << "kept " << ref.kept.size();
  std::printf("sample_rows chi-square: %.1f over %.0f degrees of freedom (%zu kept)\n", chi2, dof,
              ref.kept.size());
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
