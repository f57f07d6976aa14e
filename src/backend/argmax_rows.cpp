// Backend::argmax_rows' default: a scan per row keeping the first of equal
// maxima (the Sampler's greedy rule), over the logits in place when they are
// host f32 (the CPU backend), else over a host f32 copy.
#include <cmath>
#include <limits>

#include "backend/backend.h"
#include "core/error.h"

namespace loom {

int32_t argmax_f32(const float* row, int64_t n) {
  // The largest value first, in 16 independent lanes: a NaN never wins a
  // comparison, so "v > m ? v : m" skips it (the compiler vectorises the
  // lanes with max instructions that keep m on a NaN).
  constexpr int kLanes = 16;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float lane[kLanes];
  for (float& l : lane) l = kNegInf;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] = row[i + j] > lane[j] ? row[i + j] : lane[j];
  float m = kNegInf;
  for (; i < n; ++i) m = row[i] > m ? row[i] : m;
  for (float l : lane) m = l > m ? l : m;
  // Then its first index (every value is -inf or NaN: the first -inf; only
  // NaNs: none, so 0).
  for (int64_t k = 0; k < n; ++k)
    if (row[k] == m) return static_cast<int32_t>(k);
  return 0;
}

void Backend::argmax_rows(const Tensor& logits, std::vector<int32_t>& out) {
  LOOM_CHECK(logits.ndim() >= 1 && logits.cols() > 0 && logits.cols() <= INT32_MAX,
             "argmax_rows: logits {} must be [rows, vocab] with 0 < vocab < 2^31",
             shape_str(logits.shape()));
  const int64_t rows = logits.rows(), vocab = logits.cols();
  out.assign(static_cast<size_t>(rows), 0);
  if (rows == 0) return;
  std::vector<float> copy;
  const float* values = nullptr;
  if (logits.device() == Device::Cpu && logits.dtype() == DType::F32) {
    synchronize();
    values = logits.data_as<const float>();
  } else {
    copy_to_host_f32(*this, logits, copy);
    values = copy.data();
  }
  for (int64_t r = 0; r < rows; ++r)
    out[static_cast<size_t>(r)] = argmax_f32(values + r * vocab, vocab);
}

}  // namespace loom
