// WeightSource over an HF model directory: one model.safetensors, or the
// shards named by model.safetensors.index.json. Tensors are exposed under
// canonical names (hf_names.h); tensors that do not map are ignored.
// Shard names must be plain file names inside the directory.
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "model/loader/bounded_json.h"
#include "model/loader/hf_names.h"
#include "model/loader/mapped_file.h"
#include "model/loader/safetensors.h"
#include "model/loader/weights.h"

namespace loom {
namespace {

constexpr size_t kMaxIndexBytes = 64u << 20;

struct Located {
  std::shared_ptr<const SafetensorsFile> file;
  const SafetensorsTensorInfo* info;
};

class HfWeights final : public WeightSource {
 public:
  explicit HfWeights(std::map<std::string, Located> tensors) : tensors_(std::move(tensors)) {}

  std::optional<Tensor> find(const std::string& name) const override {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) return std::nullopt;
    return it->second.file->tensor(*it->second.info);
  }

  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    out.reserve(tensors_.size());
    for (const auto& [name, _] : tensors_) out.push_back(name);
    return out;
  }

 private:
  std::map<std::string, Located> tensors_;  // canonical name -> where it is
};

// A shard name from the index must name a file directly inside the directory.
void check_shard_name(const std::string& index_path, const std::string& shard) {
  const bool bad = shard.empty() || shard == "." || shard == ".." ||
                   shard.find('/') != std::string::npos || shard.find('\\') != std::string::npos ||
                   shard.find('\0') != std::string::npos;
  if (bad) LOOM_THROW("{}: shard name '{}' is not a plain file name in the model directory", index_path, shard);
}

}  // namespace

std::unique_ptr<WeightSource> open_hf_weights(const std::string& model_dir) {
  namespace fs = std::filesystem;
  const fs::path dir(model_dir);
  const fs::path index_path = dir / "model.safetensors.index.json";
  const fs::path single_path = dir / "model.safetensors";

  // HF name -> (file, info), before mapping.
  std::vector<std::pair<std::string, Located>> hf;
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    const std::string label = index_path.string();
    const std::string text = read_small_file(label, kMaxIndexBytes);
    const nlohmann::json index = parse_bounded_json(text, label, JsonLimits{4, 1u << 22});
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      LOOM_THROW("{}: no weight_map object", label);
    std::map<std::string, std::shared_ptr<const SafetensorsFile>> shards;
    for (const auto& [name, shard_json] : index["weight_map"].items()) {
      if (!shard_json.is_string()) LOOM_THROW("{}: weight_map entry '{}' is not a string", label, name);
      const std::string shard = shard_json.get<std::string>();
      check_shard_name(label, shard);
      auto& file = shards[shard];
      if (!file) file = std::make_shared<SafetensorsFile>((dir / shard).string());
      const SafetensorsTensorInfo* info = file->find_tensor(name);
      if (!info) LOOM_THROW("{}: tensor '{}' is listed in shard '{}' but is not in it", label, name, shard);
      hf.push_back({name, Located{file, info}});
    }
  } else if (fs::exists(single_path, ec)) {
    auto file = std::make_shared<const SafetensorsFile>(single_path.string());
    for (const auto& t : file->tensors()) hf.push_back({t.name, Located{file, &t}});
  } else {
    LOOM_THROW("{}: no model.safetensors or model.safetensors.index.json", model_dir);
  }

  std::vector<std::string> hf_names;
  hf_names.reserve(hf.size());
  for (const auto& [name, _] : hf) hf_names.push_back(name);
  const bool sandwich = hf_has_sandwich_norms(hf_names);

  std::map<std::string, Located> tensors;
  std::map<std::string, std::string> source;  // canonical -> HF name, for messages
  for (auto& [name, where] : hf) {
    auto canonical = hf_to_canonical_name(name, sandwich);
    if (!canonical) continue;
    const auto [it, inserted] = source.emplace(*canonical, name);
    if (!inserted)
      LOOM_THROW("{}: tensors '{}' and '{}' both map to '{}'", model_dir, it->second, name, *canonical);
    tensors.emplace(*canonical, std::move(where));
  }
  return std::make_unique<HfWeights>(std::move(tensors));
}

}  // namespace loom
