// PipelineParallel: the model's layers split into consecutive stages, one per
// group of tensor-parallel ranks (rank = stage * tp_size + tp_rank). Every
// rank gets each step (rank 0's ModelRunner broadcasts it), cuts it into
// micro-batches of whole sequences and runs them through its layers in order:
// stage 0 embeds, the others receive the hidden states [T, hidden] from the
// same TP rank of the previous stage, and every stage but the last sends them
// on. The last stage collects the micro-batches' logits and its TP rank 0
// sends them to rank 0 after the last micro-batch, so a stage works on
// micro-batch m + 1 while the next one works on m. Owned by the runtime;
// called on the engine thread (rank 0) or the worker's main thread.
#pragma once

#include <cstdint>
#include <vector>

#include "model/transformer.h"

namespace loom {

class Communicator;

struct PipelineLayout {
  int stages = 1;         // P
  int tp_size = 1;        // ranks per stage
  int micro_batches = 0;  // per step (at most one per sequence); 0: as many as stages
  int rank_of(int stage, int tp_rank) const { return stage * tp_size + tp_rank; }
  int stage_of(int rank) const { return rank / tp_size; }
  int tp_rank_of(int rank) const { return rank % tp_size; }
};

// Layers [L*s/P, L*(s+1)/P) of stage s of P. Throws loom::Error when there
// are more stages than layers.
PipelineStage stage_layers(int64_t num_layers, int stage, int stages);

// The config of a Transformer running layers [first, last) of `config`:
// num_layers and layer_is_sliding cover those layers only.
ModelConfig stage_config(const ModelConfig& config, int64_t first, int64_t last);

// One micro-batch of a step: whole sequences, re-based to start at token 0.
struct MicroBatch {
  StepInput step;
  // For each of step.logit_rows: its index among the whole step's logit rows,
  // or -1 for a row asked only because the micro-batch needs one.
  std::vector<int32_t> outputs;
};

// Cuts `step` (whose attention metadata must be valid) into at most `parts`
// micro-batches of consecutive sequences with about the same token counts.
std::vector<MicroBatch> split_step(const StepInput& step, int parts);

class PipelineParallel final : public StageLink {
 public:
  // `world` holds every rank of the job (stages * tp_size); it must outlive
  // this object. Throws loom::Error when the layout does not fit the model.
  PipelineParallel(Communicator& world, PipelineLayout layout, int64_t num_layers);

  const PipelineLayout& layout() const { return layout_; }
  int stage_index() const { return stage_; }
  bool last_stage() const { return stage_ == layout_.stages - 1; }
  // This rank's layers, linked to this object (the Transformer's argument).
  PipelineStage stage() const;
  // Layers of the largest stage: every rank must fit the same block count.
  int64_t max_stage_layers() const;

  // Every rank, the same step, with its own stage's model and cache. Rank 0
  // returns the logits [logit_rows, vocab] (valid until the next call), the
  // other ranks an empty tensor. Checks every micro-batch before any transfer
  // (a bad step throws loom::Error on every rank alike); a dead peer throws
  // DistError.
  Tensor forward(Transformer& model, const StepInput& step, KvCache& cache);

  void receive_hidden(Tensor& x) override;
  void send_hidden(const Tensor& x) override;

 private:
  Communicator& world_;
  PipelineLayout layout_;
  int64_t num_layers_ = 0;
  int stage_ = 0;
  int tp_rank_ = 0;
  Tensor collected_;  // last stage: the micro-batches' logits, in micro-batch order
  Tensor logits_;     // last stage (sent) and rank 0 (received): step output order
  std::vector<int32_t> order_;
};

}  // namespace loom
