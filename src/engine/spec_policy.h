// SpecPolicy: speculative decoding's per-step decision, from measured costs.
// A decode-only step costs what it measured (wall seconds, by its number of
// query tokens M: one per decoding sequence plus the draft tokens verified);
// a draft of k tokens makes the step k tokens larger, costs the proposer's
// own time (a draft model's passes; an n-gram lookup is free), and yields on
// average E(k) = 1 + a + a^2 + ... + a^k tokens instead of 1, where a is the
// chance that a draft token is accepted once the previous one was. a is
// learnt per sequence from its verifies (and, for a free proposer, from
// proposals it never verified, checked against the tokens that followed),
// starting from the proposer's acceptance over all sequences for the
// proposal's quality class (an n-gram proposal's match length). A sequence
// speculates with the k that saves the most time over the step's tokens, and
// not at all when no k saves time; then it rests (twice as long each time)
// before proposing again, a draft model's next proposal a probe of one token
// (its rests long enough that probes take at most 2% of the time).
// Jump-forward proposals (a constraint's forced tokens, kForced) are a class
// of their own: their evidence, per sequence and overall, and their rests are
// kept apart from the proposer's, so a sequence's n-gram or draft-model
// history neither hides nor inflates what its forced tokens are worth; they
// cost next to nothing to make, so they rest like a free proposer's and
// those not verified are checked against the tokens that follow.
// Pure logic fed with measurements; engine thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

namespace loom {

// Seconds of a decode-only step by its query tokens M: running averages per
// M, and between or beyond the measured sizes a straight line through the
// nearest two measured ones. A size not measured in the last kStaleSteps
// measurements counts as not measured (a spike on a shared machine must not
// rule a size out for long: the estimate then explores it again, at worst
// one verify in kStaleSteps steps).
class StepCostTable {
 public:
  void observe(int32_t tokens, double seconds);
  // Estimated seconds of a step of `tokens` (>= 1) query tokens; 0 when
  // nothing is measured. With one measured size every size costs the same
  // (optimistic: the first verify step measures a second size).
  double estimate(int32_t tokens) const;
  bool measured(int32_t tokens) const;
  static constexpr uint64_t kStaleSteps = 256;

 private:
  std::vector<double> seconds_;  // [tokens]: running average; 0: not measured
  std::vector<uint64_t> when_;   // [tokens]: the measurement count at its last one
  uint64_t count_ = 0;
};

// Acceptance evidence: draft tokens accepted out of those tested (the
// accepted ones and the first rejected one), decayed so recent proposals
// count most.
struct AcceptanceStats {
  double accepted = 0.0;
  double tested = 0.0;
  // A proposal of `proposed` tokens whose first `accepted` held.
  void observe(int32_t proposed, int32_t accepted, double decay);
};

struct SpecPolicyConfig {
  int32_t max_tokens = 4;  // k at most (--num-speculative-tokens)
  int32_t max_forced_tokens = 8;  // jump-forward: k at most (--jump-forward-tokens)
  // The proposer costs (next to) nothing (n-gram): every proposal is used as
  // evidence, verified or not; rests are short (they only let steps run
  // asynchronously). Otherwise (a draft model) rests grow from rest_steps to
  // max_rest_steps and end with a probe of one token.
  bool free_proposals = false;
  int32_t rest_steps = 16;
  int32_t max_rest_steps = 256;
  // Draft models: a rest is at least as long as keeps the last proposer
  // call's time (a probe's) within this share of the steps' time, up to
  // max_probe_rest_steps.
  double max_probe_share = 0.02;
  int32_t max_probe_rest_steps = 4096;
  int32_t max_free_rest_steps = 8;
  // Evidence of one sequence decays by this per proposal; the proposer-wide
  // estimate for the proposal's class weighs as this many tested tokens.
  double sequence_decay = 0.8;
  double prior_weight = 2.0;
  double class_decay = 0.99;
  // A draft must save at least this share of a token's plain time, so that
  // noise in the measured costs does not make speculation cost time.
  double min_saving = 0.05;
  // Every sequence proposes max_tokens every step and verifies all of it
  // (benchmarks of the mechanism's ceiling); evidence is still gathered.
  bool always = false;
  // Tests: fixed seconds per step of M query tokens instead of measured ones
  // (proposals then cost nothing).
  std::function<double(int32_t)> fixed_step_seconds;
};

class SpecPolicy {
 public:
  // The quality class of jump-forward proposals.
  static constexpr int32_t kForced = -1;

  explicit SpecPolicy(SpecPolicyConfig config);

  // Measurements: a decode-only step of `tokens` query tokens took `seconds`;
  // a proposer call of `passes` model passes took `seconds`.
  void observe_step(int32_t tokens, double seconds);
  void observe_proposal(int32_t passes, double seconds);
  // A verify of `proposed` draft tokens of sequence `seq` (those chosen last
  // for it, forced or not), of which the first `accepted` held.
  void observe_verify(uint64_t seq, int32_t proposed, int32_t accepted);
  // Free proposers and jump-forward: checks the sequence's unverified
  // proposal, if any, against its tokens known now.
  void check_shadow(uint64_t seq, std::span<const int32_t> known);

  // The estimated acceptance chance of sequence `seq`'s next draft token.
  double acceptance(uint64_t seq, int32_t quality) const;

  // A step's decisions: step() for every decoding sequence (a step of its
  // rest, whether or not its tokens are known: async steps count too);
  // begin_step with their number; then for each sequence that may propose
  // (ready: not resting) the tokens to ask the proposer for (request), and once
  // proposed, the draft tokens to verify (choose: 0..available, best
  // sequences first; each makes the step larger for the next). A free
  // proposer's unverified proposal is kept as evidence (`draft` at `base`
  // known tokens).
  void begin_step(int32_t decoding);
  void step(uint64_t seq);
  bool ready(uint64_t seq) const;
  int32_t request(uint64_t seq);
  int32_t choose(uint64_t seq, int32_t quality, std::span<const int32_t> draft, int32_t base);

  // Whether the sequence may propose after the next step (its tokens must
  // then come back to the host).
  bool proposes_soon(uint64_t seq) const;

  // Jump-forward, for constrained sequences only (others get no state): may
  // it look for forced tokens now (not resting), soon (after the next step);
  // it found none (it rests: 1, 2, 4 ... max_free_rest_steps steps). Forced
  // drafts are then chosen by choose() with quality kForced.
  bool forced_ready(uint64_t seq) const;
  bool forced_soon(uint64_t seq) const;
  void no_forced(uint64_t seq);
  // Forgets every sequence not in `running` (sorted).
  void retain(std::span<const uint64_t> running);

  const StepCostTable& costs() const { return costs_; }

 private:
  struct SeqState {
    AcceptanceStats stats;
    int32_t rest = 0;              // steps left before it proposes again
    int32_t next_rest = 0;         // the next rest's length (0: the first)
    bool probe = false;            // draft models: the next proposal is one token
    bool probing = false;          // that proposal is being made
    bool verifying_probe = false;  // the draft being verified is a probe
    int32_t quality = 0;           // of the draft chosen last
    // Free proposers and jump-forward: a proposal not verified, from
    // `shadow_base` tokens (one at a time, whichever class).
    std::vector<int32_t> shadow;
    int32_t shadow_base = 0;
    int32_t shadow_quality = 0;
    // Jump-forward: its evidence and rests, apart from the proposer's.
    AcceptanceStats forced;
    int32_t forced_rest = 0;
    int32_t forced_next_rest = 0;
    bool verifying_forced = false;  // the draft being verified is forced
  };
  double step_seconds(int32_t tokens) const;
  // The k in [0, min(available, max_k)] that saves the most seconds at
  // acceptance a, counting `pass_seconds` per draft-model pass beyond this step's.
  int32_t best_k(double a, int32_t available, int32_t max_k, double pass_seconds) const;
  AcceptanceStats& class_stats(int32_t quality);
  // A draft of k tokens at acceptance a joins this step.
  void add_to_step(double a, int32_t k);
  double class_acceptance(int32_t quality) const;
  void rest(SeqState& st);

  SpecPolicyConfig config_;
  StepCostTable costs_;
  double pass_seconds_ = 0.0;           // a draft model's seconds per pass (running average)
  double last_proposal_seconds_ = 0.0;  // the last proposer call's seconds
  std::vector<AcceptanceStats> classes_;
  AcceptanceStats forced_class_;  // kForced's
  std::unordered_map<uint64_t, SeqState> seqs_;
  // This step so far: query tokens, expected tokens out, draft-model passes.
  int32_t step_tokens_ = 0;
  double step_yield_ = 0.0;
  int32_t step_passes_ = 0;
  // Draft models: the rest length set last (0 after a sequence chose to
  // speculate); new sequences start resting that long.
  int32_t rest_level_ = 0;
};

}  // namespace loom
