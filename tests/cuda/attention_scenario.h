// Paged attention scenarios shared by the CUDA attention tests. A scenario
// first writes every sequence's cached prefix (one write_kv step), then runs a
// step of the new tokens: they are written and attended, so decodes, prefill
// chunks over cached prefixes and whole prefills share one launch. Every
// backend given the same scenario gets the same bf16-rounded q/k/v and the
// same shuffled block tables (the CPU cache is f32 holding bf16 values). With
// fp8_kv, both backends' caches are FP8 E4M3 with the same per-head scales:
// they quantise the same bf16 values to the same bytes, and the CPU reference
// attends over their exact dequantised values.
#pragma once

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "cuda_test_util.h"

namespace loom::cudatest {

struct Seq {
  int n_new;
  int ctx;
};

struct Scenario {
  int heads, kv_heads, head_dim, block_size;
  std::vector<Seq> seqs;
  AttentionParams params;
  uint32_t seed = 1;
  bool fp8_kv = false;
};

// Per-head scales of FP8 scenario caches: random K/V in [-1, 1] fill E4M3's
// range at a different exponent per head.
inline std::vector<float> fp8_kv_scales(int kv_heads) {
  std::vector<float> s(static_cast<size_t>(kv_heads));
  for (int h = 0; h < kv_heads; ++h)
    s[static_cast<size_t>(h)] = 1.0f / (200.0f + 90.0f * static_cast<float>(h));
  return s;
}

inline std::string describe(const Scenario& sc) {
  std::ostringstream s;
  int64_t tokens = 0;
  for (const Seq& q : sc.seqs) tokens += q.n_new;
  s << "heads " << sc.heads << "/" << sc.kv_heads << " hd " << sc.head_dim << " bs "
    << sc.block_size << " window " << sc.params.sliding_window << " softcap "
    << sc.params.logit_softcap << " seqs " << sc.seqs.size() << " tokens " << tokens
    << (sc.fp8_kv ? " fp8 kv" : "");
  return s.str();
}

// A scenario set up on one backend: a fresh cache holding both steps' K/V,
// and q of the new tokens. attend() runs the second step's attention.
class ScenarioRun {
 public:
  ScenarioRun(Backend& be, const Scenario& sc) : be_(be), sc_(sc), gpu_(be.device() == Device::Cuda) {
    const int ns = static_cast<int>(sc.seqs.size());
    const int bs = sc.block_size, hd = sc.head_dim, kvh = sc.kv_heads, heads = sc.heads;
    int max_blocks = 1, total_blocks = 0;
    for (const Seq& s : sc.seqs) {
      const int b = (s.ctx + bs - 1) / bs;
      max_blocks = std::max(max_blocks, b);
      total_blocks += b;
    }
    const int num_blocks = total_blocks + 3;
    std::vector<int32_t> ids(num_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::mt19937 rng(sc.seed);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<int32_t> tables(static_cast<size_t>(ns) * max_blocks, 0);
    for (int s = 0, next = 0; s < ns; ++s)
      for (int b = 0; b < (sc.seqs[s].ctx + bs - 1) / bs; ++b) tables[s * max_blocks + b] = ids[next++];
    auto slot_of = [&](int s, int pos) { return int64_t{tables[s * max_blocks + pos / bs]} * bs + pos % bs; };

    // Step 0: the cached prefixes. Step 1: the new tokens.
    for (int i = 0; i < 2; ++i) {
      AttentionMetadata& m = step_[i];
      m.num_seqs = ns;
      m.max_blocks_per_seq = max_blocks;
      m.block_tables = tables;
      m.query_start = {0};
      for (int s = 0; s < ns; ++s) {
        const int prefix = sc.seqs[s].ctx - sc.seqs[s].n_new;
        const int b = i == 0 ? 0 : prefix, e = i == 0 ? prefix : sc.seqs[s].ctx;
        for (int p = b; p < e; ++p) m.slot_mapping.push_back(slot_of(s, p));
        m.query_start.push_back(m.query_start.back() + (e - b));
        m.context_lens.push_back(e);
      }
    }
    const int64_t row = int64_t{kvh} * hd;
    const DType cache_type = sc.fp8_kv ? DType::F8_E4M3 : gpu_ ? DType::BF16 : DType::F32;
    if (gpu_) {
      cache_ = {be.alloc(cache_type, {num_blocks, bs, kvh, hd}),
                be.alloc(cache_type, {num_blocks, bs, kvh, hd})};
    } else {
      cache_ = {Tensor::cpu(cache_type, {num_blocks, bs, kvh, hd}),
                Tensor::cpu(cache_type, {num_blocks, bs, kvh, hd})};
    }
    if (sc.fp8_kv) {
      const std::vector<float> scales = fp8_kv_scales(kvh);
      cache_.k_scale = gpu_ ? gpu_f32(be, scales, {kvh}) : cpu_f32(scales, {kvh});
      cache_.v_scale = gpu_ ? gpu_f32(be, scales, {kvh}) : cpu_f32(scales, {kvh});
    }
    for (int i = 0; i < 2; ++i) {
      const int64_t t = static_cast<int64_t>(step_[i].slot_mapping.size());
      if (t == 0 && i == 0) continue;
      const auto k = random_bf16_values(t * row, sc.seed * 10 + i);
      const auto v = random_bf16_values(t * row, sc.seed * 10 + i + 5);
      be.write_kv(input(k, {t, kvh, hd}), input(v, {t, kvh, hd}), cache_, step_[i]);
    }
    tokens_ = static_cast<int64_t>(step_[1].slot_mapping.size());
    q_ = input(random_bf16_values(tokens_ * heads * hd, sc.seed * 10 + 9, -2, 2), {tokens_, heads, hd});
  }

  // The attention output of the new tokens as floats [tokens, heads,
  // head_dim], given the step's metadata (or another object of the same
  // contents).
  std::vector<float> attend(const AttentionMetadata* meta = nullptr) {
    const AttentionMetadata& m = meta ? *meta : step_[1];
    const std::vector<int64_t> shape = {tokens_, sc_.heads, sc_.head_dim};
    if (!gpu_) {
      Tensor out = Tensor::cpu(DType::F32, shape);
      be_.paged_attention(q_, cache_, m, sc_.params, out);
      return values(out);
    }
    Tensor out = be_.alloc(DType::BF16, shape);
    be_.paged_attention(q_, cache_, m, sc_.params, out);
    return from_gpu_bf16(be_, out);
  }

  const AttentionMetadata& new_tokens_step() const { return step_[1]; }
  // The cache's K bytes (after both steps' writes).
  std::vector<uint8_t> k_cache_bytes() {
    std::vector<uint8_t> b(static_cast<size_t>(cache_.k.nbytes()));
    if (gpu_)
      be_.copy_to_host(b.data(), cache_.k, b.size());
    else
      std::memcpy(b.data(), cache_.k.data(), b.size());
    return b;
  }

 private:
  Tensor input(const std::vector<float>& v, std::vector<int64_t> shape) {
    return gpu_ ? gpu_bf16(be_, v, std::move(shape)) : cpu_f32(v, std::move(shape));
  }

  Backend& be_;
  Scenario sc_;
  bool gpu_;
  AttentionMetadata step_[2];
  KvLayerCache cache_;
  int64_t tokens_ = 0;
  Tensor q_;
};

// The attention output of the scenario's second step on `be`. With `again`,
// the same call is repeated with the same metadata object (served from the
// backend's metadata cache) and its output stored there.
inline std::vector<float> run_scenario(Backend& be, const Scenario& sc, std::vector<float>* again = nullptr) {
  ScenarioRun run(be, sc);
  std::vector<float> out = run.attend();
  if (again) *again = run.attend();
  return out;
}

// max |got - want| / (rel |want| + abs) (infinite for a NaN or a size mismatch).
inline double worst_error_ratio(const std::vector<float>& got, const std::vector<float>& want, double rel,
                                double abs) {
  if (got.size() != want.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(want[i])) return INFINITY;
    worst = std::max(worst, std::fabs(double(got[i]) - want[i]) / (rel * std::fabs(double(want[i])) + abs));
  }
  return worst;
}

// expect_close, plus one log line with the worst error relative to the
// tolerance (1.0 is the limit), so a passing run still shows the margins. On
// failure, also the worst element of each failing sequence by (token of the
// sequence, head, dim), for got/want laid out [tokens, heads, head_dim].
inline void check_and_report(const std::vector<float>& got, const std::vector<float>& want, double rel, double abs,
                             const Scenario& sc, const std::string& label) {
  const double worst = worst_error_ratio(got, want, rel, abs);
  std::printf("  %-12s %-72s worst err/tol %.3f\n", label.c_str(), describe(sc).c_str(), worst);
  expect_close(got, want, rel, abs, label + " " + describe(sc));
  if (worst <= 1.0 || got.size() != want.size()) return;
  const int64_t hd = sc.head_dim, per_token = int64_t{sc.heads} * hd;
  int64_t tok0 = 0;
  for (size_t s = 0; s < sc.seqs.size(); ++s) {
    const Seq& q = sc.seqs[s];
    double w = 0;
    int64_t at = -1;
    for (int64_t i = tok0 * per_token; i < (tok0 + q.n_new) * per_token; ++i) {
      const double tol = rel * std::fabs(double(want[i])) + abs;
      const double r = std::isnan(got[i]) ? INFINITY : std::fabs(double(got[i]) - want[i]) / tol;
      if (r > w) w = r, at = i;
    }
    if (w > 1.0) {
      const int64_t j = at / per_token - tok0, head = at % per_token / hd, d = at % hd;
      std::printf("    seq %zu (new %d, context %d, first position %d): worst err/tol %.3f at token %lld "
                  "(position %lld) head %lld dim %lld: got %g want %g\n",
                  s, q.n_new, q.ctx, q.ctx - q.n_new, w, static_cast<long long>(j),
                  static_cast<long long>(q.ctx - q.n_new + j), static_cast<long long>(head),
                  static_cast<long long>(d), got[at], want[at]);
    }
    tok0 += q.n_new;
  }
}

}  // namespace loom::cudatest
