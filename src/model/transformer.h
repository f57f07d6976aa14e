// Transformer: the one decoder forward pass shared by every registered
// architecture (their differences are ModelConfig flags), over a paged KV
// cache, written against backend ops only. Owns the prepared weights and the
// activation buffers, which are allocated once and grown when a step needs
// more rows. Not thread-safe: one thread (the engine thread) calls forward().
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"

namespace loom {

class WeightSource;
class Communicator;
class TensorParallel;

// One forward step: the new tokens of every scheduled sequence, contiguous
// per sequence and in position order (see AttentionMetadata).
struct StepInput {
  std::vector<int32_t> tokens;      // [T] token ids
  std::vector<int32_t> positions;   // [T] absolute positions (context_len - new + i per sequence)
  AttentionMetadata attn;
  std::vector<int32_t> logit_rows;  // step rows that need logits, in output order
  // Step rows whose final-norm hidden state is wanted too (pooling), in
  // output order: Transformer::hidden_states() after forward().
  std::vector<int32_t> hidden_rows;
  // A token t < 0 is row -t - 1 of token_source: int32 ids on the backend's
  // device written by an earlier step (the engine's async scheduling feeds a
  // step the tokens its predecessor sampled before the host has seen them).
  // Resolved on the device; only for a model on one rank.
  const Tensor* token_source = nullptr;
};

// The model's paged KV cache: one KvLayerCache per layer, K and V each
// [num_blocks, block_size, num_kv_heads, head_dim] on the backend's device.
struct KvCache {
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  DType dtype = DType::F32;
  std::vector<KvLayerCache> layers;
};

// Pipeline parallelism (model/pipeline_parallel.h): a Transformer running
// only some layers gets its input hidden states [T, hidden] from the previous
// stage instead of embedding tokens (unless it starts at layer 0), and hands
// them on instead of computing logits (unless it ends at the last layer).
// Called from inside forward(); `x` is on the backend's device.
class StageLink {
 public:
  virtual ~StageLink() = default;
  virtual void receive_hidden(Tensor& x) = 0;
  virtual void send_hidden(const Tensor& x) = 0;
};

// The layers [first_layer, last_layer) a Transformer runs; `link` must be set
// (and outlive the Transformer) unless that is the whole model.
struct PipelineStage {
  int64_t first_layer = 0;
  int64_t last_layer = -1;  // -1: through the model's last layer
  StageLink* link = nullptr;
};

class Transformer {
 public:
  // Prepares every weight through `backend` (tied embeddings share
  // token_embd; HF Gemma's (1 + w) norms use the ops' weight offset) and
  // checks each shape against `config`. Throws loom::Error naming the tensor.
  // `backend` must outlive the Transformer; `weights` need not (prepared
  // tensors keep their memory alive).
  // With `tp` of size > 1 (tensor parallelism) this rank loads only its shard
  // (model/sharding.h) and forward() all-reduces after o-proj and down-proj;
  // every rank of `tp` must run the same forward() steps. `tp` must outlive
  // the Transformer. config() is then this rank's (its heads, KV heads and
  // MLP columns; the full vocabulary).
  // With a `stage` of fewer layers (pipeline parallelism) only those layers'
  // weights are read (token_embd on the first stage and, for tied
  // embeddings, the last; the final norm and output on the last), config()
  // counts only those layers, the KV cache holds only those, and forward()
  // on a stage other than the last returns the hidden states it sent.
  Transformer(ModelConfig config, const WeightSource& weights, Backend& backend,
              Communicator* tp = nullptr, const PipelineStage& stage = {});
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelConfig& config() const { return config_; }
  Backend& backend() const { return backend_; }

  // A zeroed cache for this model (block_size tokens per block).
  KvCache allocate_kv_cache(int64_t num_blocks, int64_t block_size, DType dtype) const;
  // Bytes of one block over all layers, K and V.
  int64_t kv_cache_bytes_per_block(int64_t block_size, DType dtype) const;

  // Runs one step: writes the new tokens' K/V into `cache` and returns the
  // logits [logit_rows.size(), vocab] (backend activation dtype: f32 on CPU)
  // on the backend's device. The returned tensor views a buffer owned by this
  // Transformer and stays valid until the next forward() call.
  Tensor forward(const StepInput& step, KvCache& cache);
  // The last forward()'s final-norm hidden states of step.hidden_rows,
  // [hidden_rows.size(), hidden] (activation dtype) on the backend's device;
  // an empty tensor when it asked for none. Same lifetime as the logits.
  // Only on the last pipeline stage.
  Tensor hidden_states() const;
  // Throws loom::Error when forward() would refuse `step` (before any
  // collective or transfer).
  void check_step(const StepInput& step, const KvCache& cache) const;

  // Decode steps (one new token per sequence, logits for every row) of up to
  // max_batch sequences are then recorded by the backend (CUDA graphs) once
  // per (batch bucket, block-table width bucket), padded to the bucket, and
  // replayed; other steps run op by op. Ignored by backends that cannot
  // record; 0 turns it off (the default).
  void enable_step_graphs(int32_t max_batch);
  // Other steps of up to max_tokens tokens (at most 4,096: prefill chunks,
  // steps mixing prefill and decode, decode batches past the recorded ones)
  // are then padded to a token bucket and run in pieces: the ops between two
  // attentions recorded once per (bucket, piece) and replayed, each layer's
  // attention launched as usual between them (it reads the step's metadata
  // on the host). Backends that cannot record run the padded pieces op by op
  // (which tests use: a real row's values are those of the unpadded step).
  // 0 turns it off (the default); not with tensor or pipeline parallelism.
  void enable_piecewise_steps(int32_t max_tokens);
  struct GraphStats {
    uint64_t replayed = 0;  // steps run from a recording
    uint64_t piecewise = 0;  // steps run padded in pieces (replayed, or op by op the first time and without recording)
    uint64_t replayed_multi_row = 0;  // of those, steps of several rows per sequence (draft verification)
    uint64_t recorded = 0;  // recordings made
    uint64_t eager = 0;     // steps run op by op
  };
  const GraphStats& graph_stats() const { return graph_stats_; }
  // Host time of the last forward()'s input upload (with the padded copy of
  // a recorded step's input) and of queuing its ops or replaying its
  // recording, and whether it was replayed. Measured only after
  // set_forward_timing(true) (the engine's step profile); zeros otherwise.
  struct ForwardTiming {
    double upload_s = 0;
    double launch_s = 0;
    bool replayed = false;
  };
  void set_forward_timing(bool on) { time_forward_ = on; }
  const ForwardTiming& last_forward_timing() const { return forward_timing_; }

 private:
  struct LayerWeights;
  struct Buffers;
  struct Graphs;

  void fuse_projections(LayerWeights& l);
  static const LinearWeight* qkv_input_of(const LayerWeights& l);
  void ensure_buffers(int64_t tokens, int64_t logit_rows, int64_t hidden_rows = 0);
  // Uploads the step's token ids and positions and its attention metadata.
  void upload_inputs(const StepInput& step, const KvCache& cache);
  // The op sequence from the embedding to the logits, reading only device
  // memory prepared by upload_inputs (so a backend can record it).
  void run_ops(const StepInput& step, KvCache& cache);
  // run_ops in parts: the ops between two attentions (piece 0 .. L, see the
  // definition), layer `layer`'s attention, and the final norm and lm_head
  // (or the hand-over to the next pipeline stage).
  void run_piece(size_t piece, const StepInput& step, KvCache& cache);
  void run_attention(size_t layer, const StepInput& step, KvCache& cache);
  void run_head(const StepInput& step);
  // The clock for ForwardTiming (a zero time point when not timing).
  std::chrono::steady_clock::time_point timing_now() const;
  void record_forward_timing(std::chrono::steady_clock::time_point start,
                             std::chrono::steady_clock::time_point uploaded, bool replayed);
  // forward() of a decode step through a recording; nullopt: run it eagerly.
  std::optional<Tensor> forward_recorded(const StepInput& step, KvCache& cache);
  // forward() of another step through recorded pieces; nullopt: run it eagerly.
  std::optional<Tensor> forward_piecewise(const StepInput& step, KvCache& cache);
  // Drops every recording when the activation buffers or the cache they
  // point into are not the ones they were recorded with.
  void forget_stale_recordings(const KvCache& cache);

  ModelConfig config_;
  Backend& backend_;
  float norm_offset_ = 0.0f;  // 1 for HF Gemma (1 + w) norms
  float eps_ = 0.0f;
  Tensor token_embd_;
  Tensor output_norm_;
  Tensor output_;
  std::vector<LayerWeights> layers_;
  Tensor inv_freq_global_;
  Tensor inv_freq_local_;
  std::unique_ptr<Buffers> buffers_;
  std::unique_ptr<Graphs> graphs_;
  int32_t graph_max_batch_ = 0;
  int32_t piecewise_max_tokens_ = 0;
  GraphStats graph_stats_;
  bool time_forward_ = false;
  ForwardTiming forward_timing_;
  std::unique_ptr<TensorParallel> tp_;  // null: the whole model on this rank
  StageLink* link_ = nullptr;           // null: every layer on this rank
  int64_t first_layer_ = 0;             // of the whole model
  bool first_stage_ = true;             // embeds tokens
  bool last_stage_ = true;              // computes logits
};

}  // namespace loom
