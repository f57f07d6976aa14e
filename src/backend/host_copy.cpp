// copy_to_host_f32 (backend.h): an f32, bf16 or f16 tensor of any device as
// host floats.
#include "backend/backend.h"
#include "core/error.h"
#include "core/half.h"

namespace loom {

void copy_to_host_f32(Backend& backend, const Tensor& src, std::vector<float>& out) {
  const auto n = static_cast<size_t>(src.numel());
  out.resize(n);
  switch (src.dtype()) {
    case DType::F32:
      backend.copy_to_host(out.data(), src, n * sizeof(float));
      return;
    case DType::BF16:
    case DType::F16: {
      std::vector<uint16_t> raw(n);
      backend.copy_to_host(raw.data(), src, n * sizeof(uint16_t));
      const bool bf16 = src.dtype() == DType::BF16;
      for (size_t i = 0; i < n; ++i) out[i] = bf16 ? bf16_to_f32(raw[i]) : f16_to_f32(raw[i]);
      return;
    }
    default:
      LOOM_THROW("copy_to_host_f32: unsupported dtype {}", dtype_name(src.dtype()));
  }
}

}  // namespace loom
