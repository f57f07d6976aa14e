// TensorParallel: the communication a Transformer does when its weights are
// one rank's shard (sharding.h): the vocab-parallel embedding's id mapping
// and sum, the all-reduce after each row-parallel matmul (o-proj, down-proj),
// and the vocab-parallel lm_head whose partial logits are all-gathered into
// the full [rows, vocab] on every rank. Owned by the Transformer; called on
// its thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "dist/communicator.h"
#include "model/sharding.h"

namespace loom {

class TensorParallel {
 public:
  // `comm` and `backend` must outlive this object.
  TensorParallel(Communicator& comm, TensorParallelShard shard, Backend& backend);

  const TensorParallelShard& shard() const { return shard_; }
  Communicator& comm() const { return comm_; }

  // Rows of this rank's token_embd (with the zero row when vocab-parallel)
  // and output matrices.
  int64_t embedding_rows() const;
  int64_t output_rows() const { return shard_.vocab_rows; }

  // The ids to look up in this rank's embedding table: vocab-parallel ids
  // outside this rank's rows map to its zero row. Valid until the next call.
  const int32_t* embedding_ids(const std::vector<int32_t>& tokens);
  // After the embedding lookup: sums the ranks' partial embeddings.
  void reduce_embedding(Tensor& x);
  // Sums a row-parallel matmul's partial outputs, in place.
  void all_reduce(Tensor& x) { comm_.all_reduce_sum(x); }
  // logits [R, vocab] = x [R, hidden] . output^T over all ranks, where
  // `output` is this rank's [output_rows, hidden] slice.
  void lm_head(const Tensor& x, const Tensor& output, Tensor& logits);

 private:
  Communicator& comm_;
  TensorParallelShard shard_;
  Backend& backend_;
  std::vector<int32_t> local_ids_;
  std::vector<int32_t> order_;  // gathered row for each output row (lm_head)
  Tensor partial_;              // [cap, vocab_rows]
  Tensor gathered_;             // [size * cap, vocab_rows]
};

}  // namespace loom
