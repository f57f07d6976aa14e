#include "model/loader/weights.h"

#include "core/error.h"

namespace loom {

Tensor WeightSource::get(const std::string& name) const {
  auto t = find(name);
  if (!t) LOOM_THROW("model has no tensor '{}'", name);
  return *t;
}

Tensor WeightSource::get(const std::string& name, const std::vector<int64_t>& shape) const {
  Tensor t = get(name);
  if (t.shape() != shape)
    LOOM_THROW("tensor '{}' has shape {}, expected {}", name, shape_str(t.shape()), shape_str(shape));
  return t;
}

}  // namespace loom
