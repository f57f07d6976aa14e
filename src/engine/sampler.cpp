// Sampler implementation. The candidate set after filtering is kept sorted by
// logit (descending, ties by token id) so draws walk a fixed order.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "core/error.h"

namespace loom {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Philox4x32-10 (Salmon et al., SC'11), as in Random123 / curand.
struct Philox {
  static void round(uint32_t (&c)[4], const uint32_t (&k)[2]) {
    constexpr uint64_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
    const uint64_t p0 = kM0 * c[0], p1 = kM1 * c[2];
    const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    uint32_t out[4] = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    std::copy(out, out + 4, c);
  }
  static void generate(uint32_t (&c)[4], uint32_t (&k)[2]) {
    for (int i = 0; i < 10; ++i) {
      round(c, k);
      if (i < 9) {
        k[0] += 0x9E3779B9u;
        k[1] += 0xBB67AE85u;
      }
    }
  }
};

}  // namespace

double philox_uniform(uint64_t seed, uint32_t seq_index, uint64_t step, uint32_t draw) {
  uint32_t key[2] = {uint32_t(seed), uint32_t(seed >> 32)};
  uint32_t ctr[4] = {uint32_t(step), uint32_t(step >> 32), seq_index, draw};
  Philox::generate(ctr, key);
  const uint64_t bits = (uint64_t(ctr[0]) << 32 | ctr[1]) >> 11;  // 53 bits
  return double(bits) * (1.0 / 9007199254740992.0);
}

Sampler::Sampler(uint64_t engine_seed) : engine_rng_(engine_seed) {}

double Sampler::draw_uniform(const SampleContext& ctx) {
  const SamplingParams& p = *ctx.params;
  return p.seed ? philox_uniform(*p.seed, uint32_t(ctx.seq_index), uint64_t(ctx.output.size()))
                : std::generate_canonical<double, 53>(engine_rng_);
}

void Sampler::logit_edits(const SampleContext& ctx, int32_t vocab, std::vector<LogitEdit>& out) {
  const SamplingParams& p = *ctx.params;
  std::unordered_map<int32_t, size_t> at;  // token -> index in out
  auto edit = [&](int32_t t) -> LogitEdit* {
    if (t < 0 || t >= vocab) return nullptr;
    auto [it, fresh] = at.emplace(t, out.size());
    if (fresh) {
      out.emplace_back();
      out.back().token = t;
    }
    return &out[it->second];
  };
  if (p.repetition_penalty != 1.0f) {
    for (int32_t t : ctx.prompt)
      if (LogitEdit* e = edit(t)) e->rep = p.repetition_penalty;
    for (int32_t t : ctx.output)
      if (LogitEdit* e = edit(t)) e->rep = p.repetition_penalty;
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int32_t> counts;
    for (int32_t t : ctx.output)
      if (t >= 0 && t < vocab) ++counts[t];
    for (const auto& [t, c] : counts) edit(t)->sub = p.frequency_penalty * float(c) + p.presence_penalty;
  }
  for (const auto& [t, bias] : p.logit_bias)
    if (LogitEdit* e = edit(t)) e->add = bias;
  for (int32_t t : ctx.banned)
    if (LogitEdit* e = edit(t)) e->ban = true;
}

int32_t Sampler::prepare(std::span<const float> logits, const SampleContext& ctx) {
  LOOM_CHECK(ctx.params != nullptr, "sampling without parameters");
  const SamplingParams& p = *ctx.params;
  const int32_t vocab = int32_t(logits.size());
  LOOM_CHECK(vocab > 0, "empty logits row");
  keep_ = 0;
  total_ = 0.0;

  // Penalties, bias, bans on a working copy.
  work_.assign(logits.begin(), logits.end());
  edits_.clear();
  logit_edits(ctx, vocab, edits_);
  for (const LogitEdit& e : edits_) work_[size_t(e.token)] = apply_logit_edit(work_[size_t(e.token)], e);

  auto better = [&](int32_t a, int32_t b) {
    return work_[a] != work_[b] ? work_[a] > work_[b] : a < b;
  };
  if (p.greedy()) {
    int32_t chosen = -1;
    for (int32_t i = 0; i < vocab; ++i)
      if (!std::isnan(work_[i]) && (chosen < 0 || better(i, chosen))) chosen = i;
    return chosen < 0 ? 0 : chosen;
  }
  // Candidates sorted best first; top-k cuts the list before sorting it all.
  order_.clear();
  for (int32_t i = 0; i < vocab; ++i)
    if (work_[i] > kNegInf) order_.push_back(i);
  if (order_.empty()) return 0;  // everything banned: nothing sensible left
  // Candidates in id order unless a filter needs them best first; top-k
  // and top-p sort lazily (the best 256 first, more only when needed).
  inv_t_ = 1.0f / p.temperature;
  size_t keep = order_.size();
  size_t sorted = 0;
  mx_ = kNegInf;
  for (int32_t t : order_) mx_ = std::max(mx_, work_[t] * inv_t_);
  if (p.top_k > 0 || p.top_p < 1.0f) {
    if (p.top_k > 0 && size_t(p.top_k) < keep) {
      keep = size_t(p.top_k);  // [0, keep) becomes the top-k set
      std::nth_element(order_.begin(), order_.begin() + long(keep), order_.end(), better);
    }
    sorted = std::min<size_t>(keep, 256);
    std::partial_sort(order_.begin(), order_.begin() + long(sorted), order_.begin() + long(keep), better);
  }
  if (p.top_p < 1.0f) {
    double z = 0.0;  // normaliser over the top-k set
    for (size_t i = 0; i < keep; ++i) z += std::exp(double(work_[order_[i]] * inv_t_ - mx_));
    double cum = 0.0;
    size_t i = 0;
    for (; i < keep; ++i) {
      if (i == sorted) {
        std::sort(order_.begin() + long(sorted), order_.begin() + long(keep), better);
        sorted = keep;
      }
      cum += std::exp(double(work_[order_[i]] * inv_t_ - mx_)) / z;
      if (cum >= double(p.top_p)) break;
    }
    keep = std::min(keep, i + 1);  // at least the best token (top_p = 0: greedy)
    sorted = std::min(sorted, keep);
  }
  if (p.min_p > 0.0f) {
    // prob >= min_p * max_prob  <=>  scaled logit >= max + log(min_p)
    const float cut = mx_ + std::log(p.min_p);
    auto mid = std::partition(order_.begin(), order_.begin() + long(keep),
                              [&](int32_t t) { return work_[t] * inv_t_ >= cut; });
    keep = std::max<size_t>(1, size_t(mid - order_.begin()));
    std::sort(order_.begin(), order_.begin() + long(keep), better);
  }
  keep_ = keep;
  for (size_t i = 0; i < keep; ++i) total_ += mass(order_[i]);
  return -1;
}

double Sampler::mass(int32_t token) const { return std::exp(double(work_[size_t(token)] * inv_t_ - mx_)); }

int32_t Sampler::draw(double u) {
  if (keep_ == 0) return 0;
  const double target = u * total_;
  double cum = 0.0;
  for (size_t i = 0; i < keep_; ++i) {
    cum += mass(order_[i]);
    if (target < cum) return order_[i];
  }
  return order_[keep_ - 1];
}

SampleResult Sampler::sample(std::span<const float> logits, const SampleContext& ctx) {
  int32_t chosen = prepare(logits, ctx);
  if (chosen < 0) chosen = draw(draw_uniform(ctx));
  SampleResult result;
  if (ctx.params->logprobs) result = logprobs_of(logits, chosen, *ctx.params->logprobs);
  result.token = chosen;
  return result;
}

SampleResult Sampler::logprobs_of(std::span<const float> logits, int32_t token, int32_t top) {
  const int32_t vocab = int32_t(logits.size());
  LOOM_CHECK(vocab > 0 && token >= 0 && token < vocab, "logprob of token {} in a row of {}", token, vocab);
  float mx = kNegInf;
  for (float x : logits) mx = std::max(mx, x);
  double sum = 0.0;
  for (float x : logits) sum += std::exp(double(x) - mx);
  const float lse = mx + float(std::log(sum));
  SampleResult r;
  r.token = token;
  r.logprob = logits[size_t(token)] - lse;
  r.rank = 1;
  for (float x : logits) r.rank += x > logits[size_t(token)];
  const int32_t k = std::min<int32_t>(top, vocab);
  if (k > 0) {
    order_.resize(size_t(vocab));
    for (int32_t i = 0; i < vocab; ++i) order_[size_t(i)] = i;
    std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), [&](int32_t a, int32_t b) {
      return logits[size_t(a)] != logits[size_t(b)] ? logits[size_t(a)] > logits[size_t(b)] : a < b;
    });
    for (int32_t i = 0; i < k; ++i) r.top.push_back({order_[size_t(i)], logits[size_t(order_[size_t(i)])] - lse});
  }
  return r;
}

}  // namespace loom
