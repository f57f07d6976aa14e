// PooledState: a pooling sequence's hidden states, summed chunk by chunk.
#include "engine/pooling.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace loom {

PooledState::PooledState(PoolingParams params, int32_t prompt_len)
    : params_(params), range_(pooling_range(params.type, prompt_len)), next_(range_.begin) {
  LOOM_CHECK(prompt_len > 0, "pooling an empty prompt");
}

void PooledState::add(const PooledRows& rows) {
  if (rows.count == 0) return;
  LOOM_CHECK(rows.first == next_ && rows.first + rows.count <= range_.end,
             "pooled positions [{}, {}) of sequence {}; [{}, {}) owed", rows.first,
             rows.first + rows.count, rows.seq, next_, range_.end);
  if (sum_.empty()) sum_.assign(rows.sum.size(), 0.0);
  LOOM_CHECK(rows.sum.size() == sum_.size(), "pooled rows of width {}, {} before", rows.sum.size(),
             sum_.size());
  for (size_t i = 0; i < sum_.size(); ++i) sum_[i] += double(rows.sum[i]);
  next_ += rows.count;
}

std::vector<float> PooledState::finish() const {
  LOOM_CHECK(done() && !sum_.empty(), "pooling finished at position {} of [{}, {})", next_,
             range_.begin, range_.end);
  std::vector<double> v = sum_;
  const double count = double(range_.end - range_.begin);
  for (double& x : v) x /= count;
  if (params_.normalize) {
    double norm = 0.0;
    for (double x : v) norm += x * x;
    // As torch.nn.functional.normalize: a zero vector stays zero.
    const double scale = 1.0 / std::max(std::sqrt(norm), 1e-12);
    for (double& x : v) x *= scale;
  }
  return std::vector<float>(v.begin(), v.end());
}

}  // namespace loom
