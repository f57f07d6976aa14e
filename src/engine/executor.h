// StepExecutor: runs the scheduler's plan for one step and returns its
// tokens. It owns everything between a StepPlan and a StepOutput: the
// model's KV cache on the device, the plan's copy-on-write block copies, the
// step's model input (tokens, positions, block tables, slot mapping, logits
// rows), the forward pass (through the ModelRunner), every decision on the
// logits (token constraints' masks, argmax on the backend, sampling on the
// backend, the host Sampler with logprobs and penalties) and the step left in
// flight by async scheduling. The engine makes no backend call itself; this
// header names neither the backend nor the model (executor_impl.h does).
// Engine thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/dtype.h"
#include "engine/api.h"
#include "engine/proposer.h"
#include "engine/scheduler.h"
#include "engine/step_output.h"

namespace loom {

class ModelRunner;
class StepProfiler;
class Transformer;

struct ExecutorConfig {
  // See EngineConfig (engine.h) for each.
  bool greedy_fast_path = true;
  bool device_sampling = true;
  bool async_scheduling = true;
  uint64_t seed = 0x10011;  // the host Sampler's engine-wide generator
  SpeculativeConfig speculative;
  JumpForwardConfig jump_forward;
  bool profile_steps = false;
};

struct ExecutorStats {
  uint64_t argmax_tokens = 0;          // tokens taken from the backend's argmax
  uint64_t device_sampled_tokens = 0;  // tokens drawn by the backend's sampler
  uint64_t async_steps = 0;            // steps left in flight for the next one
  uint64_t masked_rows = 0;            // logits rows restricted by a TokenConstraint
  MaskTimeHistogram mask_time;         // host time of each masked row's mask
  uint64_t jump_forward_tokens = 0;    // forced tokens verified (jump-forward)
  uint64_t jump_forward_accepted_tokens = 0;  // of those, accepted
};

class StepExecutor {
 public:
  // Runs the model through `runner` (which must outlive the executor), or
  // through a runner of its own over `model` (one rank).
  StepExecutor(ModelRunner& runner, ExecutorConfig config);
  StepExecutor(Transformer& model, ExecutorConfig config);
  ~StepExecutor();
  StepExecutor(const StepExecutor&) = delete;
  StepExecutor& operator=(const StepExecutor&) = delete;

  int64_t vocab_size() const;
  int64_t max_position() const;  // the model's context length (0: unknown)
  // Bytes of one KV block (every layer, K and V) of block_size tokens.
  int64_t kv_cache_bytes_per_block(int64_t block_size, DType dtype) const;
  // Allocates the KV cache (before the first execute()).
  void allocate_kv_cache(int64_t num_blocks, int64_t block_size, DType dtype);

  // Runs `plan` (its sequences read from `seqs`) and returns its output:
  // Kind Tokens, or Kind Placeholders when every sampled row's token is
  // chosen on the device and async scheduling is on (the step then stays in
  // flight; a later execute() or finish_in_flight() resolves it). With a step
  // already in flight, its tokens are handed to `deliver_previous` (Kind
  // Resolutions) once this step is launched and before its tokens are chosen
  // (they feed its penalties and constraints and may end some of its
  // sequences, whose rows are then ignored). Throws on a failed step
  // (take_failed_in_flight() names the sequences whose tokens are lost).
  using Deliver = std::function<void(const StepOutput&)>;
  StepOutput execute(const StepPlan& plan, const Scheduler& seqs, const Deliver& deliver_previous);
  // The tokens of the step in flight (Kind Resolutions); nullopt when none.
  std::optional<StepOutput> finish_in_flight();
  bool has_in_flight() const;
  // After execute() or finish_in_flight() threw: the in-flight sequences
  // whose tokens were not delivered (their placeholders stay unresolved).
  // Clears the step in flight.
  std::vector<SeqId> take_failed_in_flight();

  const ExecutorStats& stats() const;
  // The step profile's collector (ExecutorConfig::profile_steps); null when
  // off. The executor times its own phases and the step's device marks; the
  // engine adds the phases around them and opens and closes each turn.
  StepProfiler* profiler();

  // Speculative decoding, between steps: the drafts to verify in the next
  // step (Scheduler::set_draft) for the decoding sequences whose tokens are
  // all known (none past the batch cap): as many tokens as the policy
  // (spec_policy.h) finds worth verifying, from the measured step costs and
  // the sequence's acceptance, often none; constraints cut a draft at its
  // first refused token. A constrained sequence's forced tokens (jump-
  // forward) come first; the proposer's draft only where there are none.
  // Every sequence that may propose gets an entry, empty or not; without a
  // proposer, unconstrained sequences get none.
  std::vector<std::pair<SeqId, std::vector<int32_t>>> propose(const Scheduler& seqs);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom
