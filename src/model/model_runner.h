// ModelRunner: what the engine calls to run the model (KV cache set-up, block
// copies, forward steps). On its own, or with a group of one, it passes
// through to the Transformer. In a tensor-parallel group, rank 0's runner
// broadcasts each command to the other ranks before running it itself, and
// the other ranks sit in serve_worker() running the same commands on their
// shards, so every rank runs the same collectives in the same order. With
// pipeline parallelism every rank runs its stage's layers of each step
// (PipelineParallel) and rank 0 receives the logits from the last stage.
// A failed or timed-out collective (a dead or stuck peer) is fatal: the
// runner prints one line naming it and ends the whole job (exit code 3).
// Rank 0's runner is called by one thread (the engine thread); destroying it
// tells the workers to stop.
#pragma once

#include <cstdint>
#include <vector>

#include "model/transformer.h"

namespace loom {

class Communicator;
class PipelineParallel;

// One KV block copy (copy-on-write): block `src` to block `dst`, every layer.
struct KvBlockCopy {
  int32_t src = 0;
  int32_t dst = 0;
};

class ModelRunner {
 public:
  // `model` (and `comm`, which may be null) must outlive the runner; `model`
  // must have been built with the same `comm` (tensor parallelism only), or
  // with `pipeline`'s stage (then `comm` is every rank of the job and the
  // model's tensor-parallel group is its stage's ranks).
  explicit ModelRunner(Transformer& model, Communicator* comm = nullptr,
                       PipelineParallel* pipeline = nullptr);
  ~ModelRunner();  // rank 0: shutdown()
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  const ModelConfig& config() const { return model_.config(); }
  Backend& backend() const { return model_.backend(); }
  Transformer& model() const { return model_; }
  bool distributed() const;

  // Of the largest pipeline stage: every rank allocates the same block count.
  int64_t kv_cache_bytes_per_block(int64_t block_size, DType dtype) const;
  // Rank 0: every rank allocates the same cache (of its own KV heads).
  KvCache allocate_kv_cache(int64_t num_blocks, int64_t block_size, DType dtype);
  void copy_blocks(const std::vector<KvBlockCopy>& copies, KvCache& cache);
  // Rank 0: every rank runs the step; rank 0 gets the full logits.
  // Hidden rows (pooling) need the last stage on rank 0: not with pipeline
  // parallelism (throws before any rank starts the step).
  Tensor forward(const StepInput& step, KvCache& cache);
  // The last forward()'s hidden states of step.hidden_rows (Transformer::hidden_states).
  Tensor hidden_states() const { return model_.hidden_states(); }

  // Rank 0: tells the workers to leave serve_worker() (once; later calls do
  // nothing).
  void shutdown();
  // Ranks other than 0: runs rank 0's commands until it shuts down. Waits for
  // the next command without a deadline (an idle server); everything inside
  // a command has the communicator's timeout.
  void serve_worker();

 private:
  enum class Command : uint32_t { AllocateKv = 1, CopyBlocks = 2, Forward = 3, Stop = 4 };
  void send(Command command, const std::vector<uint8_t>& payload);
  [[noreturn]] void fail(const char* what, const std::exception& e);

  Tensor run_step(const StepInput& step, KvCache& cache);

  Transformer& model_;
  Communicator* comm_;
  PipelineParallel* pipeline_;
  bool stopped_ = false;
};

// Copies blocks within each layer's K and V (any device).
void copy_kv_blocks(Backend& backend, const std::vector<KvBlockCopy>& copies, KvCache& cache);

}  // namespace loom
