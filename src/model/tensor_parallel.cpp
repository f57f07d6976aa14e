// TensorParallel (tensor_parallel.h).
#include "model/tensor_parallel.h"

namespace loom {

TensorParallel::TensorParallel(Communicator& comm, TensorParallelShard shard, Backend& backend)
    : comm_(comm), shard_(shard), backend_(backend) {
  LOOM_CHECK(comm.size() == shard.size && comm.rank() == shard.rank,
             "shard {} of {} on communicator rank {} of {}", shard.rank, shard.size, comm.rank(),
             comm.size());
}

int64_t TensorParallel::embedding_rows() const {
  return shard_.vocab_parallel ? shard_.vocab_rows + 1 : shard_.vocab_rows;
}

const int32_t* TensorParallel::embedding_ids(const std::vector<int32_t>& tokens) {
  if (!shard_.vocab_parallel) return tokens.data();
  local_ids_.resize(tokens.size());
  const int64_t begin = shard_.vocab_begin, rows = shard_.vocab_rows;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t local = int64_t{tokens[i]} - begin;
    local_ids_[i] = static_cast<int32_t>(local >= 0 && local < rows ? local : rows);
  }
  return local_ids_.data();
}

void TensorParallel::reduce_embedding(Tensor& x) {
  if (shard_.vocab_parallel) comm_.all_reduce_sum(x);
}

void TensorParallel::lm_head(const Tensor& x, const Tensor& output, Tensor& logits) {
  if (!shard_.vocab_parallel) {
    backend_.matmul(x, output, nullptr, logits);
    return;
  }
  const int64_t rows = x.dim(0), part = shard_.vocab_rows, n = shard_.size;
  if (partial_.data() == nullptr || partial_.dim(0) < rows) {
    const int64_t cap = std::max<int64_t>(rows, partial_.data() ? 2 * partial_.dim(0) : rows);
    partial_ = backend_.alloc(logits.dtype(), {cap, part});
    gathered_ = backend_.alloc(logits.dtype(), {n * cap, part});
  }
  Tensor partial = partial_.slice_rows(0, rows);
  Tensor gathered = gathered_.slice_rows(0, n * rows);
  backend_.matmul(x, output, nullptr, partial);
  comm_.all_gather(partial, gathered);
  // gathered is [rank][row][part]; logits viewed as [row][rank][part].
  order_.resize(size_t(rows * n));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < n; ++k) order_[size_t(r * n + k)] = int32_t(k * rows + r);
  Tensor out = logits.reshape({rows * n, part});
  backend_.gather_rows(gathered, order_, out);
}

}  // namespace loom
