// Backend's default implementations of the optional operations: a plain copy
// through host memory, and no recorded steps.
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"

namespace loom {

void Backend::copy(Tensor& dst, const Tensor& src) {
  LOOM_CHECK(dst.dtype() == src.dtype() && dst.nbytes() == src.nbytes(), "copy: {} {} into {} {}",
             dtype_name(src.dtype()), shape_str(src.shape()), dtype_name(dst.dtype()), shape_str(dst.shape()));
  const auto bytes = static_cast<size_t>(src.nbytes());
  if (bytes == 0) return;
  if (dst.device() == Device::Cpu && src.device() == Device::Cpu) {
    synchronize();
    std::memmove(dst.data(), src.data(), bytes);
    return;
  }
  std::vector<uint8_t> staging(bytes);
  copy_to_host(staging.data(), src, bytes);
  copy_from_host(dst, staging.data(), bytes);
}

void Backend::split_qkv(const Tensor&, const QkvRope*, Tensor&, Tensor&, Tensor&, KvLayerCache*,
                        const AttentionMetadata*) {
  LOOM_THROW("backend {} has no fused projections", name());
}

void Backend::gated_activation_fused(const Tensor&, GatedActivation, Tensor&) {
  LOOM_THROW("backend {} has no fused projections", name());
}

void Backend::begin_capture() { LOOM_THROW("backend {} cannot record steps", name()); }

std::unique_ptr<StepGraph> Backend::end_capture() { LOOM_THROW("backend {} cannot record steps", name()); }

bool Backend::replay(StepGraph&) { LOOM_THROW("backend {} cannot record steps", name()); }

}  // namespace loom
