// Pooling requests (Request::pooling): the prompt is prefilled and its
// final-norm hidden states pooled into one vector instead of sampling.
// PoolingParams say how; PooledState gathers a sequence's pooled rows chunk
// by chunk (StepOutput::pooled) and makes the vector once the prompt is done.
// Engine thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "core/pooling.h"

namespace loom {

struct PoolingParams {
  PoolingType type = PoolingType::Last;
  bool normalize = true;  // L2-normalise the pooled vector
};

// The hidden states of prompt positions [first, first + count) of one
// sequence, computed by one step, summed (f32).
struct PooledRows {
  uint64_t seq = 0;
  int32_t first = 0;
  int32_t count = 0;
  std::vector<float> sum;
};

class PooledState {
 public:
  PooledState(PoolingParams params, int32_t prompt_len);
  const PoolingParams& params() const { return params_; }
  // The prompt positions still to pool: [next(), range().end). Positions
  // before next() were pooled by earlier steps (also before a preemption,
  // so a recomputed prompt does not pool them twice).
  PoolingRange range() const { return range_; }
  int32_t next() const { return next_; }
  bool done() const { return next_ == range_.end; }
  // Adds a step's rows; they must start at next().
  void add(const PooledRows& rows);
  // The pooled vector (mean: the average), normalised when asked. Throws
  // unless done().
  std::vector<float> finish() const;

 private:
  PoolingParams params_;
  PoolingRange range_;
  int32_t next_ = 0;
  std::vector<double> sum_;
};

}  // namespace loom
