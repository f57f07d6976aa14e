// Sampler: chooses the next token of one sequence from its logits row, in
// vLLM/HF order: penalties (repetition over prompt + output, presence and
// frequency over output) -> logit_bias -> bans (min_tokens) -> temperature ->
// top-k -> top-p -> min-p -> draw. Temperature 0 is greedy (argmax, lowest id
// on ties). Logprobs are those of the raw model distribution (log-softmax of
// the unmodified logits). A seeded request draws from a counter-based
// generator (Philox4x32-10) keyed by (seed, sequence index, output step), so
// its tokens do not depend on the batch, on preemption or on the order of
// calls; unseeded requests draw from the engine-wide generator.
// Not thread-safe (engine thread); one Sampler per engine.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "engine/api.h"
#include "engine/sampling_params.h"

namespace loom {

// What the sampler needs to know about one sequence.
struct SampleContext {
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt;   // prompt tokens (repetition penalty)
  std::span<const int32_t> output;   // generated so far (penalties); its size is the step
  int32_t seq_index = 0;             // index of the sequence within its request
  std::span<const int32_t> banned;   // tokens forbidden now (eos / stop ids below min_tokens)
};

// A uniform double in [0, 1) from Philox4x32-10 of (seed, seq_index, step, draw).
double philox_uniform(uint64_t seed, uint32_t seq_index, uint64_t step, uint32_t draw = 0);

class Sampler {
 public:
  explicit Sampler(uint64_t engine_seed = 0x5eed);

  // logits: the sequence's row, [vocab] f32 (not modified).
  SampleResult sample(std::span<const float> logits, const SampleContext& ctx);

  // `token`'s raw logprob in `logits` (log-softmax of the row as given) and
  // the `top` best alternatives, best first (ties: lowest id).
  SampleResult logprobs_of(std::span<const float> logits, int32_t token, int32_t top);

  // The uniform sample() would draw for ctx (consuming the engine-wide
  // generator when the request has no seed): for device sampling.
  double draw_uniform(const SampleContext& ctx);
  // ctx's penalties, logit_bias and bans as one edit per token, appended to
  // `out`: what sample() applies (apply_logit_edit) and what a backend's
  // sample_rows is given, so both edit a row alike.
  static void logit_edits(const SampleContext& ctx, int32_t vocab, std::vector<LogitEdit>& out);

 private:
  std::mt19937_64 engine_rng_;
  std::vector<float> work_;        // scratch, vocab sized
  std::vector<int32_t> order_;
  std::vector<LogitEdit> edits_;   // scratch: the row's penalties, bias and bans

  // Fills work_ with the edited row; greedy: returns the choice. Sampling:
  // returns -1 with the candidates in order_[0, keep_) (in draw order),
  // scaled by inv_t_ around mx_, their masses summing to total_.
  int32_t prepare(std::span<const float> logits, const SampleContext& ctx);
  double mass(int32_t token) const;  // unnormalised probability of a candidate
  // Walks the candidates to the one where the cumulative mass passes u * total.
  int32_t draw(double u);
  size_t keep_ = 0;
  float inv_t_ = 1.0f;
  float mx_ = 0.0f;
  double total_ = 0.0;
};

}  // namespace loom
