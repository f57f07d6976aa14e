// StepExecutor's state and the steps of execute(), shared by executor.cpp
// (inputs, forward, the step in flight) and executor_tokens.cpp (token
// choice). Internal to the executor.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "engine/executor.h"
#include "engine/sampler.h"
#include "engine/spec_policy.h"
#include "engine/step_profiler.h"
#include "model/model_runner.h"

namespace loom {

struct StepExecutor::Impl {
  Impl(std::unique_ptr<ModelRunner> own, ModelRunner& runner, ExecutorConfig config);

  // Per sampled row of a synchronous step (plan order), where its tokens come
  // from: host_row >= 0: the Sampler on row host_row of logits_host;
  // device_first >= 0: device_tokens[device_first + i] for draw i; otherwise argmax.
  struct RowSource {
    int32_t host_row = -1;
    int32_t device_first = -1;
  };
  struct Selection {
    std::vector<RowSource> rows;
    std::vector<int32_t> argmax;
    std::vector<int32_t> device_tokens;
  };

  // Where each scheduled sequence's logits rows are in the step's logits:
  // its prompt-logprob rows (prompt positions prompt_pos, ...), then its
  // sample row (when the step computes its last known token; never for a
  // pooling sequence); and its rows of the step's hidden states (pooling:
  // prompt positions pool_pos, ...).
  struct RowLayout {
    SeqId seq = 0;
    int32_t prompt_row = 0;   // first prompt-logprob row
    int32_t prompt_rows = 0;  // they give prompt tokens prompt_pos + 1, ...
    int32_t prompt_pos = 0;
    int32_t sample_row = -1;  // -1: none
    int32_t draft_rows = 0;   // speculative: the draft's rows, right after the sample row
    int32_t pool_row = 0;     // first hidden-state row
    int32_t pool_rows = 0;
    int32_t pool_pos = 0;
  };

  // The step's model input; fills `layout` (and `extra_rows`).
  StepInput build_input(const StepPlan& plan, const Scheduler& seqs);
  // Prompt logprobs of the layout's prompt rows (host), into out.
  void score_prompts(const Tensor& logits, const Scheduler& seqs, StepOutput& out);
  // The sample rows of `logits` of sequences without a draft, gathered into
  // a tensor of their own, in layout order.
  Tensor sample_rows_only(const Tensor& logits, int64_t num_sampled);
  // Speculative decoding: each draft's rows verified (executor_verify.cpp);
  // the accepted draft tokens and the step's own token into out.
  void verify_drafts(Tensor& logits, const Scheduler& seqs, StepOutput& out);
  // Masks of the constrained verify rows: row i's mask is the constraint's
  // state after the draft's first i tokens (cut where it refuses one).
  void mask_draft_rows(const RowLayout& r, const Sequence& s, int32_t vocab, std::vector<int32_t>& rows,
                       std::vector<uint32_t>& words);
  // The sequences of the layout's sample rows (0: ended meanwhile, or
  // scoring its prompt only).
  std::vector<SeqId> sampled_rows(const Scheduler& seqs) const;
  // Pooling: the step's hidden-state rows copied to the host and summed
  // per sequence (StepOutput::pooled).
  std::vector<PooledRows> pool_hidden_states();
  // The step's tokens from its logits (after the forward pass and the
  // previous step's delivery): constraints, then argmax / device / host
  // sampling, prompt scoring and draft verification.
  StepOutput choose(const Scheduler& seqs, Tensor& logits);
  // Applies the constraints' allowed-token masks of the live rows to `logits`.
  void apply_constraints(const std::vector<SeqId>& rows, const Scheduler& seqs, Tensor& logits);
  // Whether every live row gets its token on the device (no logprobs, no
  // fork, greedy or device-sampled) so the step can stay in flight.
  bool can_run_async(const std::vector<SeqId>& rows, const Scheduler& seqs) const;
  // Appends the device-sampler specs of row r (one per sibling still to fork).
  void add_device_specs(int32_t r, const Sequence& s, int64_t vocab);
  StepOutput choose_tokens(const std::vector<SeqId>& rows, const Scheduler& seqs, const Tensor& logits);
  Selection select(const std::vector<SeqId>& rows, const Scheduler& seqs, const Tensor& logits);
  StepOutput launch_async(const std::vector<SeqId>& rows, const Scheduler& seqs, const Tensor& logits);
  std::optional<StepOutput> finish_in_flight();

  std::unique_ptr<ModelRunner> own_runner;  // when built over a Transformer
  ModelRunner& model;
  ExecutorConfig config;
  KvCache cache;
  Sampler sampler;
  ExecutorStats stats;
  std::vector<float> logits_host;
  Tensor sample_logits;  // device rows gathered for the host sampler (grown on demand)
  std::vector<SampleSpec> sample_specs;
  std::vector<LogitEdit> logit_edits;
  std::vector<RowLayout> layout;
  bool extra_rows = false;  // rows other than sample rows (prompt logprobs)
  Tensor compact_logits;    // sample rows gathered when extra_rows (grown on demand)
  Tensor prompt_rows;       // the prompt-logprob rows of a step's logits, kept across steps
  std::vector<float> prompt_host;
  std::vector<float> pool_host;
  std::vector<int32_t> mask_rows;
  std::vector<uint32_t> mask_words;
  // apply_constraints' scratch: the constrained rows, whether each got a
  // mask, and the host time of each fill.
  std::vector<std::pair<int32_t, TokenConstraint*>> mask_todo;
  std::vector<uint8_t> mask_filled;
  std::vector<double> mask_seconds;
  // The step in flight (async scheduling): the sequence of each sampled row
  // (0: none), its device ids (a view of step_ids[k]) and their copy to the host.
  struct InFlight {
    std::vector<SeqId> rows;
    Tensor ids;
    std::unique_ptr<Backend::TokenDownload> download;
  } in_flight;
  Tensor step_ids[2];  // alternate: one step writes while the next reads the other
  int step_ids_next = 0;
  std::vector<SeqId> failed;  // undelivered rows of a failed step in flight
  std::shared_ptr<Proposer> proposer;  // speculative decoding; null: off
  // With a proposer or jump-forward: when and how much to speculate.
  std::unique_ptr<SpecPolicy> policy;
  // Jump-forward: whether sequence s looks for forced tokens (constrained by a
  // rule that can force some; never an unconstrained sequence).
  bool jumps_forward(const Sequence& s) const {
    return config.jump_forward.enabled && config.jump_forward.max_tokens > 0 && s.constraint &&
           s.constraint->jumps_forward();
  }
  std::vector<SeqId> forced_drafts;  // sorted: the sequences whose draft is forced tokens
  std::vector<int32_t> verify_host_rows;
  std::vector<float> verify_host;
  // A verify step's logit rows gathered per path (argmax, device sampling,
  // host), kept across steps: [capacity, vocab] each.
  Tensor verify_rows[3];
  std::unique_ptr<StepProfiler> profiler;  // ExecutorConfig::profile_steps; null: off
};

}  // namespace loom
