// SpecPolicy (spec_policy.h): the cost table, acceptance estimates, rests.
#include "engine/spec_policy.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace loom {
namespace {

constexpr int32_t kMaxTabulatedTokens = 1 << 16;
constexpr double kStepAverageWeight = 0.2;  // of the newest measurement
constexpr double kPassAverageWeight = 0.2;

}  // namespace

void StepCostTable::observe(int32_t tokens, double seconds) {
  if (tokens < 1 || tokens > kMaxTabulatedTokens || !(seconds > 0.0)) return;
  if (seconds_.size() <= size_t(tokens)) {
    seconds_.resize(size_t(tokens) + 1, 0.0);
    when_.resize(size_t(tokens) + 1, 0);
  }
  double& s = seconds_[size_t(tokens)];
  s = !measured(tokens) ? seconds : (1.0 - kStepAverageWeight) * s + kStepAverageWeight * seconds;
  when_[size_t(tokens)] = ++count_;
}

bool StepCostTable::measured(int32_t tokens) const {
  return tokens >= 0 && size_t(tokens) < seconds_.size() && seconds_[size_t(tokens)] > 0.0 &&
         count_ - when_[size_t(tokens)] < kStaleSteps;
}

double StepCostTable::estimate(int32_t tokens) const {
  if (measured(tokens)) return seconds_[size_t(tokens)];
  // The two nearest measured sizes below and above.
  int32_t lo[2] = {0, 0}, hi[2] = {0, 0};
  for (int32_t t = std::min<int32_t>(tokens, int32_t(seconds_.size()) - 1); t >= 1 && lo[1] == 0;
       --t)
    if (measured(t)) (lo[0] == 0 ? lo[0] : lo[1]) = t;
  for (int32_t t = tokens + 1; t < int32_t(seconds_.size()) && hi[1] == 0; ++t)
    if (measured(t)) (hi[0] == 0 ? hi[0] : hi[1]) = t;
  auto at = [&](int32_t t) { return seconds_[size_t(t)]; };
  auto line = [&](int32_t a, int32_t b) {
    const double slope = std::max(0.0, (at(b) - at(a)) / double(b - a));
    return std::max(0.0, at(a) + slope * double(tokens - a));
  };
  if (lo[0] != 0 && hi[0] != 0) return line(lo[0], hi[0]);
  if (lo[0] != 0) return lo[1] != 0 ? line(lo[1], lo[0]) : at(lo[0]);
  if (hi[0] != 0) return hi[1] != 0 ? std::min(at(hi[0]), line(hi[0], hi[1])) : at(hi[0]);
  return 0.0;
}

void AcceptanceStats::observe(int32_t proposed, int32_t accepted_now, double decay) {
  accepted = accepted * decay + double(accepted_now);
  tested = tested * decay + double(accepted_now) + (accepted_now < proposed ? 1.0 : 0.0);
}

SpecPolicy::SpecPolicy(SpecPolicyConfig config) : config_(std::move(config)) {
  LOOM_CHECK(config_.max_tokens >= 1, "speculative tokens {}", config_.max_tokens);
}

void SpecPolicy::observe_step(int32_t tokens, double seconds) {
  costs_.observe(tokens, seconds);
}

void SpecPolicy::observe_proposal(int32_t passes, double seconds) {
  if (passes < 1 || !(seconds > 0.0) || config_.fixed_step_seconds) return;
  last_proposal_seconds_ = seconds;
  const double per_pass = seconds / double(passes);
  pass_seconds_ = pass_seconds_ == 0.0
                      ? per_pass
                      : (1.0 - kPassAverageWeight) * pass_seconds_ + kPassAverageWeight * per_pass;
}

AcceptanceStats& SpecPolicy::class_stats(int32_t quality) {
  if (quality == kForced) return forced_class_;
  const size_t q = size_t(std::max(0, quality));
  if (classes_.size() <= q) classes_.resize(q + 1);
  return classes_[q];
}

double SpecPolicy::class_acceptance(int32_t quality) const {
  const size_t q = size_t(std::max(0, quality));
  const AcceptanceStats c = quality == kForced    ? forced_class_
                            : q < classes_.size() ? classes_[q]
                                                  : AcceptanceStats{};
  return (c.accepted + 1.0) / (c.tested + 2.0);  // a uniform prior: 0.5 before any evidence
}

double SpecPolicy::acceptance(uint64_t seq, int32_t quality) const {
  const double prior = class_acceptance(quality);
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) return prior;
  const AcceptanceStats& s = quality == kForced ? it->second.forced : it->second.stats;
  return (s.accepted + config_.prior_weight * prior) / (s.tested + config_.prior_weight);
}

void SpecPolicy::observe_verify(uint64_t seq, int32_t proposed, int32_t accepted) {
  if (proposed <= 0) return;
  SeqState& st = seqs_[seq];
  if (std::exchange(st.verifying_forced, false)) {
    st.forced.observe(proposed, accepted, config_.sequence_decay);
    forced_class_.observe(proposed, accepted, config_.class_decay);
    return;
  }
  st.stats.observe(proposed, accepted, config_.sequence_decay);
  class_stats(st.quality).observe(proposed, accepted, config_.class_decay);
  // A rejected probe: rest again, longer; an accepted one: the next step
  // decides from the costs.
  if (std::exchange(st.verifying_probe, false) && accepted < proposed) rest(st);
}

void SpecPolicy::check_shadow(uint64_t seq, std::span<const int32_t> known) {
  const auto it = seqs_.find(seq);
  if (it == seqs_.end() || it->second.shadow.empty()) return;
  SeqState& st = it->second;
  const int64_t seen = int64_t(known.size()) - st.shadow_base;
  const auto proposed = int32_t(st.shadow.size());
  int32_t held = 0;
  while (held < proposed && held < seen &&
         known[size_t(st.shadow_base + held)] == st.shadow[size_t(held)])
    ++held;
  if (held < proposed && held >= seen)
    return;  // not decided yet: its next tokens are still to come
  const bool forced = st.shadow_quality == kForced;
  (forced ? st.forced : st.stats).observe(proposed, held, config_.sequence_decay);
  class_stats(st.shadow_quality).observe(proposed, held, config_.class_decay);
  st.shadow.clear();
  // What it would have proposed held: no more resting.
  if (held >= 2) {
    (forced ? st.forced_rest : st.rest) = 0;
    (forced ? st.forced_next_rest : st.next_rest) = 0;
  }
}

double SpecPolicy::step_seconds(int32_t tokens) const {
  return config_.fixed_step_seconds ? config_.fixed_step_seconds(tokens) : costs_.estimate(tokens);
}

void SpecPolicy::begin_step(int32_t decoding) {
  step_tokens_ = decoding;
  step_yield_ = double(decoding);
  step_passes_ = 0;
}

int32_t SpecPolicy::best_k(double a, int32_t available, int32_t max_k, double pass_seconds) const {
  const double base = step_seconds(step_tokens_);
  if (!(base > 0.0) || step_yield_ <= 0.0) return 0;
  // Seconds per token of the step as it stands: what a token gained saves.
  const double per_token = base / step_yield_;
  int32_t best = 0;
  double best_saving = config_.min_saving * per_token;
  double extra = 0.0, p = 1.0;  // expected tokens beyond the step's own; a^k
  for (int32_t k = 1; k <= std::min(available, max_k); ++k) {
    p *= a;
    extra += p;
    const double added = step_seconds(step_tokens_ + k) - base +
                         pass_seconds * double(std::max(0, k - step_passes_));
    const double saving = extra * per_token - added;
    if (saving > best_saving) {
      best = k;
      best_saving = saving;
    }
  }
  return best;
}

void SpecPolicy::rest(SeqState& st) {
  if (config_.free_proposals) {
    st.next_rest = st.next_rest == 0 ? 1 : std::min(2 * st.next_rest, config_.max_free_rest_steps);
  } else {
    st.next_rest =
        st.next_rest == 0 ? config_.rest_steps : std::min(2 * st.next_rest, config_.max_rest_steps);
    // A probe costs a proposer call (a draft model first catches up on every
    // token it has not seen: a prefill); rest long enough that probes take
    // at most max_probe_share of the time.
    const double plain = step_seconds(step_tokens_);
    if (plain > 0.0 && last_proposal_seconds_ > 0.0) {
      const double floor = last_proposal_seconds_ / (config_.max_probe_share * plain);
      st.next_rest =
          std::max(st.next_rest, int32_t(std::min(floor, double(config_.max_probe_rest_steps))));
    }
    st.probe = true;
  }
  st.rest = st.next_rest;
  rest_level_ = st.next_rest;
}

void SpecPolicy::step(uint64_t seq) {
  auto [it, added] = seqs_.try_emplace(seq);
  SeqState& st = it->second;
  // A draft model's new sequence starts where the last rest left off: with a
  // draft that is rarely right, each sequence's probes do not start over.
  if (added && !config_.free_proposals && rest_level_ > 0) {
    st.next_rest = rest_level_;
    st.rest = rest_level_;
    st.probe = true;
  }
  if (st.rest > 0) --st.rest;
  if (st.forced_rest > 0) --st.forced_rest;
}

bool SpecPolicy::ready(uint64_t seq) const {
  const auto it = seqs_.find(seq);
  return config_.always || it == seqs_.end() || it->second.rest == 0;
}

int32_t SpecPolicy::request(uint64_t seq) {
  SeqState& st = seqs_[seq];
  if (config_.free_proposals || config_.always) return config_.max_tokens;
  if (st.probe) {
    st.probe = false;
    st.probing = true;
    step_passes_ = std::max(step_passes_, 1);
    return 1;
  }
  if (!(step_seconds(step_tokens_) > 0.0)) return 0;  // no plain step measured yet: decode first
  const int32_t k =
      best_k(acceptance(seq, 0), config_.max_tokens, config_.max_tokens, pass_seconds_);
  if (k == 0) {
    rest(st);
    return 0;
  }
  step_passes_ = std::max(step_passes_, k);
  return k;
}

int32_t SpecPolicy::choose(uint64_t seq, int32_t quality, std::span<const int32_t> draft,
                           int32_t base) {
  SeqState& st = seqs_[seq];
  const double a = acceptance(seq, quality);
  if (quality == kForced) {
    const auto available = int32_t(draft.size());
    const int32_t k = config_.always ? std::min(config_.max_forced_tokens, available)
                                     : best_k(a, available, config_.max_forced_tokens, 0.0);
    if (k == 0) {
      // Evidence all the same: forced tokens cost nothing to propose.
      if (!draft.empty() && st.shadow.empty()) {
        st.shadow.assign(draft.begin(), draft.end());
        st.shadow_base = base;
        st.shadow_quality = kForced;
      }
      if (step_seconds(step_tokens_) > 0.0) no_forced(seq);
      return 0;
    }
    st.forced_next_rest = 0;
    st.verifying_forced = true;
    add_to_step(a, k);
    return k;
  }
  // A draft model's passes are spent by now; only the verify's cost counts.
  // A probe is verified whatever it costs: it is how a resting sequence
  // learns that its drafts turned good.
  const bool probing = std::exchange(st.probing, false);
  const int32_t k = config_.always ? std::min<int32_t>(config_.max_tokens, int32_t(draft.size()))
                    : probing      ? std::min<int32_t>(1, int32_t(draft.size()))
                                   : best_k(a, int32_t(draft.size()), config_.max_tokens, 0.0);
  if (k == 0) {
    if (config_.free_proposals && !draft.empty() && st.shadow.empty()) {
      st.shadow.assign(draft.begin(), draft.end());
      st.shadow_base = base;
      st.shadow_quality = quality;
    }
    // Costs not measured yet: no verdict on the sequence, no rest.
    if (step_seconds(step_tokens_) > 0.0) rest(st);
    return 0;
  }
  if (!probing) {
    st.next_rest = 0;
    rest_level_ = 0;
  }
  st.verifying_probe = probing;
  st.quality = quality;
  add_to_step(a, k);
  return k;
}

void SpecPolicy::add_to_step(double a, int32_t k) {
  double extra = 0.0, p = 1.0;
  for (int32_t i = 0; i < k; ++i) extra += (p *= a);
  step_tokens_ += k;
  step_yield_ += extra;
}

bool SpecPolicy::forced_ready(uint64_t seq) const {
  const auto it = seqs_.find(seq);
  return config_.always || it == seqs_.end() || it->second.forced_rest == 0;
}

bool SpecPolicy::forced_soon(uint64_t seq) const {
  const auto it = seqs_.find(seq);
  return config_.always || it == seqs_.end() || it->second.forced_rest <= 1;
}

void SpecPolicy::no_forced(uint64_t seq) {
  SeqState& st = seqs_[seq];
  st.forced_next_rest =
      st.forced_next_rest == 0 ? 1 : std::min(2 * st.forced_next_rest, config_.max_free_rest_steps);
  st.forced_rest = st.forced_next_rest;
}

bool SpecPolicy::proposes_soon(uint64_t seq) const {
  if (config_.always) return true;
  const auto it = seqs_.find(seq);
  return it == seqs_.end() || it->second.rest <= 1;
}

void SpecPolicy::retain(std::span<const uint64_t> running) {
  for (auto it = seqs_.begin(); it != seqs_.end();)
    it = std::binary_search(running.begin(), running.end(), it->first) ? std::next(it)
                                                                       : seqs_.erase(it);
}

}  // namespace loom
