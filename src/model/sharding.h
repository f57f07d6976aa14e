// Tensor-parallel sharding of a decoder's weights: which heads, MLP columns
// and vocabulary rows one rank holds, and a WeightSource that hands out only
// that rank's slices (views of the mapped file for row slices; a copy of just
// the needed bytes for column slices). Layout (Megatron-style):
//   column-parallel (rows of [N, K]): attn_q/k/v (+ biases), ffn_gate, ffn_up
//   row-parallel (columns of [N, K]): attn_output, ffn_down; their outputs are
//     summed over ranks, so attn_output.bias is kept by rank 0 only
//   vocab-parallel: token_embd and output split by vocabulary rows (when the
//     vocabulary divides evenly; else both are replicated)
//   KV heads: split when num_kv_heads divides by the rank count, else each
//     rank keeps the one KV head its query heads use (replicated)
//   norms: replicated
// Pure functions; callable from any thread.
#pragma once

#include <cstdint>
#include <memory>

#include "model/config.h"

namespace loom {

class WeightSource;

struct TensorParallelShard {
  int rank = 0;
  int size = 1;
  int64_t heads_begin = 0, num_heads = 0;        // query heads of this rank
  int64_t kv_heads_begin = 0, num_kv_heads = 0;  // KV heads this rank holds
  bool kv_replicated = false;                    // size > num_kv_heads
  int64_t inter_begin = 0, inter_size = 0;       // MLP intermediate columns
  bool vocab_parallel = false;                   // token_embd / output split by rows
  int64_t vocab_begin = 0, vocab_rows = 0;       // this rank's vocabulary rows
};

// The shard of `rank` in a group of `size`. Throws loom::Error with the reason
// when the model cannot be split that way (heads or intermediate size not
// divisible, KV heads neither dividing nor divided by size).
TensorParallelShard plan_tensor_parallel(const ModelConfig& config, int rank, int size);

// The config one rank's Transformer runs: its heads, KV heads and MLP
// columns; vocab_size stays the full vocabulary (logits are gathered).
ModelConfig shard_config(const ModelConfig& config, const TensorParallelShard& shard);

// `full`'s tensors as this rank's slices, under the same names and with the
// shapes shard_config implies. With vocab_parallel, token_embd.weight is
// [vocab_rows + 1, hidden]: the last row is zeros, the target of ids outside
// this rank's rows (so the embedding of a foreign id adds nothing to the sum).
// Column slices of quantised tensors must start and end on block boundaries;
// find() throws loom::Error naming the tensor otherwise. `full` must outlive
// the result.
std::unique_ptr<WeightSource> shard_weights(const WeightSource& full, const ModelConfig& config,
                                            const TensorParallelShard& shard);

}  // namespace loom
