// Backend::argmax_rows' default: a scan per row keeping the first of equal
// maxima (the Sampler's greedy rule), over the logits in place when they are
// host f32 (the CPU backend), else over a host f32 copy.
#include <cmath>

#include "backend/backend.h"
#include "core/error.h"

namespace loom {

void Backend::argmax_rows(const Tensor& logits, std::vector<int32_t>& out) {
  LOOM_CHECK(logits.ndim() >= 1 && logits.cols() > 0 && logits.cols() <= INT32_MAX,
             "argmax_rows: logits {} must be [rows, vocab] with 0 < vocab < 2^31", shape_str(logits.shape()));
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
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = values + r * vocab;
    int64_t best = -1;
    for (int64_t i = 0; i < vocab; ++i)
      if (!std::isnan(row[i]) && (best < 0 || row[i] > row[best])) best = i;
    out[static_cast<size_t>(r)] = static_cast<int32_t>(best < 0 ? 0 : best);
  }
}

}  // namespace loom
