// Pooling type from GGUF metadata or sentence-transformers' module files.
#include "model/pooling_config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "model/loader/gguf.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

constexpr uintmax_t kMaxModuleFileBytes = 1 << 20;

nlohmann::json read_json(const fs::path& p) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(p, ec);
  if (ec) LOOM_THROW("cannot read {}: {}", p.string(), ec.message());
  if (size > kMaxModuleFileBytes)
    LOOM_THROW("{} is larger than {} bytes", p.string(), kMaxModuleFileBytes);
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) LOOM_THROW("{}: not valid JSON", p.string());
  return j;
}

}  // namespace

PoolingConfig pooling_config_from_gguf(const GgufFile& file) {
  const std::string key = file.get_string("general.architecture", "") + ".pooling_type";
  const int64_t v = file.get_int(key, -1);
  PoolingConfig c;
  // llama.cpp's llama_pooling_type: 0 none (per-token outputs), 1 mean, 2 cls, 3 last, 4 rank.
  switch (v) {
    case -1:
    case 0:
      return c;
    case 1:
      c.type = PoolingType::Mean;
      break;
    case 2:
      c.type = PoolingType::Cls;
      break;
    case 3:
      c.type = PoolingType::Last;
      break;
    case 4:
      LOOM_THROW("GGUF metadata: {} = 4 (rank, a reranker head) is not supported", key);
    default:
      LOOM_THROW("GGUF metadata: {} = {} is not a pooling type (0..4)", key, v);
  }
  c.source = "GGUF " + key;
  return c;
}

PoolingConfig pooling_config_from_hf_dir(const fs::path& dir) {
  PoolingConfig c;
  const fs::path modules_path = dir / "modules.json";
  std::error_code ec;
  if (!fs::exists(modules_path, ec)) return c;
  const nlohmann::json modules = read_json(modules_path);
  if (!modules.is_array()) LOOM_THROW("{}: expected a list of modules", modules_path.string());
  for (const auto& m : modules) {
    if (!m.is_object() || m.value("type", "") != "sentence_transformers.models.Pooling") continue;
    const nlohmann::json& path = m.contains("path") ? m["path"] : nlohmann::json();
    if (!path.is_string()) LOOM_THROW("{}: the Pooling module has no path", modules_path.string());
    const fs::path rel(path.get<std::string>());
    if (rel.is_absolute() || rel.lexically_normal().string().rfind("..", 0) == 0)
      LOOM_THROW("{}: the Pooling module's path '{}' leaves the model directory",
                 modules_path.string(), rel.string());
    const fs::path config_path = dir / rel / "config.json";
    const nlohmann::json p = read_json(config_path);
    if (!p.is_object()) LOOM_THROW("{}: expected an object", config_path.string());
    auto on = [&](const char* mode) { return p.value(mode, false) == true; };
    std::vector<PoolingType> types;
    if (on("pooling_mode_lasttoken")) types.push_back(PoolingType::Last);
    if (on("pooling_mode_mean_tokens")) types.push_back(PoolingType::Mean);
    if (on("pooling_mode_cls_token")) types.push_back(PoolingType::Cls);
    for (const char* unsupported : {"pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                                    "pooling_mode_weightedmean_tokens"})
      if (on(unsupported)) LOOM_THROW("{}: {} is not supported", config_path.string(), unsupported);
    if (types.size() != 1)
      LOOM_THROW(
          "{}: expected exactly one of pooling_mode_lasttoken, pooling_mode_mean_tokens, "
          "pooling_mode_cls_token",
          config_path.string());
    c.type = types[0];
    c.source = (rel / "config.json").string();
    return c;
  }
  return c;
}

}  // namespace loom
