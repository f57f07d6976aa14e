// interleave_weight: Q8_0 / Q5_0 / Q4_K / Q5_K / Q6_K matrices to their
// 16-row interleaved types at load (quant/interleave.h), which the decode
// kernels read with the rows as vector lanes; every other op reads them back
// row by row.
#include "backend/quant/interleave.h"

#include <cstdlib>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "core/file_pages.h"

namespace loom::cpu {

bool interleave_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("LOOM_CPU_INTERLEAVE");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

Tensor interleave_weight(ThreadPool& pool, const Tensor& w) {
  const DType to = quant::interleaved_type(w.dtype());
  if (!interleave_enabled() || to == w.dtype() || w.ndim() != 2 ||
      w.dim(0) % quant::kInterleaveRows != 0 || w.dim(0) == 0)
    return w;
  const int64_t groups = w.dim(0) / quant::kInterleaveRows, row_bytes = w.row_stride_bytes();
  Tensor out = Tensor::cpu_uninitialized(to, w.shape());  // every byte written below
  const auto* src = static_cast<const uint8_t*>(w.data());
  auto* dst = static_cast<uint8_t*>(out.data());
  const int64_t group_bytes = quant::kInterleaveRows * row_bytes;
  pool.parallel_for(
      groups,
      [&](int64_t b, int64_t e) {
        for (int64_t g = b; g < e; ++g)
          quant::interleave_group(to, src + g * group_bytes, row_bytes, dst + g * group_bytes);
      },
      std::max<int64_t>(1, 65536 / group_bytes));
  // The copy is what runs from now on: a file's pages of the original stop
  // counting in resident memory (they stay in the page cache).
  release_file_pages(w.data(), static_cast<size_t>(w.nbytes()));
  return out;
}

}  // namespace loom::cpu
