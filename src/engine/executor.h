// StepExecutor: runs the scheduler's plan for one step and returns its
// tokens. It owns everything between a StepPlan and a StepOutput: the
// model's KV cache on the device, the plan's copy-on-write block copies, the
// step's model input (tokens, positions, block tables, slot mapping, logits
// rows), the forward pass (through the ModelRunner), every decision on the
// logits (token constraints' masks, argmax on the backend, sampling on the
// backend, the host Sampler with logprobs and penalties) and the step left in
// flight by async scheduling. The engine makes no backend call itself.
// Engine thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/step_output.h"
#include "model/model_runner.h"

namespace loom {

struct ExecutorConfig {
  // See EngineConfig (engine.h) for each.
  bool greedy_fast_path = true;
  bool device_sampling = true;
  bool async_scheduling = true;
  uint64_t seed = 0x10011;  // the host Sampler's engine-wide generator
};

struct ExecutorStats {
  uint64_t argmax_tokens = 0;          // tokens taken from the backend's argmax
  uint64_t device_sampled_tokens = 0;  // tokens drawn by the backend's sampler
  uint64_t async_steps = 0;            // steps left in flight for the next one
  uint64_t masked_rows = 0;            // logits rows restricted by a TokenConstraint
};

class StepExecutor {
 public:
  // `model` must outlive the executor. Allocates the KV cache of num_blocks
  // blocks of block_size tokens in kv_dtype.
  StepExecutor(ModelRunner& model, int64_t num_blocks, int64_t block_size, DType kv_dtype,
               ExecutorConfig config);
  ~StepExecutor();
  StepExecutor(const StepExecutor&) = delete;
  StepExecutor& operator=(const StepExecutor&) = delete;

  // Runs `plan` (its sequences read from `seqs`) and returns its output:
  // Kind Tokens, or Kind Placeholders when every sampled row's token is
  // chosen on the device and async scheduling is on (the step then stays in
  // flight; a later execute() or finish_in_flight() resolves it). With a step
  // already in flight, its tokens are handed to `deliver_previous` (Kind
  // Resolutions) once this step is launched and before its tokens are chosen
  // (they feed its penalties and may end some of its sequences, whose rows
  // are then ignored). Throws on a failed step (failed_sequences() names the
  // sequences whose tokens are lost).
  using Deliver = std::function<void(const StepOutput&)>;
  StepOutput execute(const StepPlan& plan, const Scheduler& seqs, const Deliver& deliver_previous);
  // The tokens of the step in flight (Kind Resolutions); nullopt when none.
  std::optional<StepOutput> finish_in_flight();
  bool has_in_flight() const { return in_flight_.download != nullptr; }
  // After execute() or finish_in_flight() threw: the in-flight sequences
  // whose tokens were not delivered (their placeholders stay unresolved).
  // Clears the step in flight.
  std::vector<SeqId> take_failed_in_flight();

  const ExecutorStats& stats() const { return stats_; }
  Backend& backend() const { return model_.backend(); }

 private:
  // Per sampled row of a synchronous step (plan order), where its tokens come
  // from: host_row >= 0: the Sampler on row host_row of logits_host_;
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

  StepInput build_input(const StepPlan& plan, const Scheduler& seqs) const;
  // The sequences of the plan's sampled rows (0: ended meanwhile).
  static std::vector<SeqId> sampled_rows(const StepPlan& plan, const Scheduler& seqs);
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

  ModelRunner& model_;
  ExecutorConfig config_;
  KvCache cache_;
  Sampler sampler_;
  ExecutorStats stats_;
  std::vector<float> logits_host_;
  Tensor sample_logits_;  // device rows gathered for the host sampler (grown on demand)
  std::vector<SampleSpec> sample_specs_;
  std::vector<LogitEdit> logit_edits_;
  std::vector<int32_t> mask_rows_;
  std::vector<uint32_t> mask_words_;
  // The step in flight (async scheduling): the sequence of each sampled row
  // (0: none), its device ids (a view of step_ids_[k]) and their copy to the host.
  struct InFlight {
    std::vector<SeqId> rows;
    Tensor ids;
    std::unique_ptr<Backend::TokenDownload> download;
  } in_flight_;
  Tensor step_ids_[2];  // alternate: one step writes while the next reads the other
  int step_ids_next_ = 0;
  std::vector<SeqId> failed_;  // undelivered rows of a failed step in flight
};

}  // namespace loom
