// WeightSource helpers and the GGUF-backed source (GGUF names are already
// canonical, so it is a thin view over GgufFile).
#include "model/loader/weights.h"

#include "core/error.h"
#include "model/loader/gguf.h"

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

namespace {

class GgufWeights final : public WeightSource {
 public:
  explicit GgufWeights(std::shared_ptr<const GgufFile> file) : file_(std::move(file)) {}

  std::optional<Tensor> find(const std::string& name) const override {
    const GgufTensorInfo* info = file_->find_tensor(name);
    if (!info) return std::nullopt;
    return file_->tensor(*info);
  }

  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    out.reserve(file_->tensors().size());
    for (const auto& t : file_->tensors()) out.push_back(t.name);
    return out;
  }

 private:
  std::shared_ptr<const GgufFile> file_;
};

}  // namespace

std::unique_ptr<WeightSource> open_gguf_weights(std::shared_ptr<const GgufFile> file) {
  if (!file) LOOM_THROW("open_gguf_weights: no file");
  return std::make_unique<GgufWeights>(std::move(file));
}

}  // namespace loom
