// open_model: format detection (GGUF magic vs. HF directory), config and
// weight loading, generation defaults.
#include "model/model.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "model/config_json.h"
#include "model/loader/gguf.h"
#include "model/loader/weights.h"

namespace loom {

namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxJsonBytes = 16 << 20;

std::string read_small_file(const fs::path& p) {
  std::error_code ec;
  const auto size = fs::file_size(p, ec);
  if (ec) LOOM_THROW("cannot read {}: {}", p.string(), ec.message());
  if (size > kMaxJsonBytes) LOOM_THROW("{} is larger than {} bytes", p.string(), kMaxJsonBytes);
  std::ifstream in(p, std::ios::binary);
  if (!in) LOOM_THROW("cannot open {}", p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool has_gguf_magic(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

void add_ids(const ConfigJson& c, const char* key, std::vector<int32_t>& out) {
  const nlohmann::json* v = c.find(key);
  if (!v) return;
  if (v->is_array()) {
    for (const auto& e : *v) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > INT32_MAX)
        c.fail(key, "must be a token id or a list of token ids");
      out.push_back(static_cast<int32_t>(e.get<int64_t>()));
    }
  } else {
    out.push_back(static_cast<int32_t>(c.integer(key, 0, INT32_MAX)));
  }
}

std::optional<int32_t> token_id(const ConfigJson& c, const char* key) {
  auto v = c.optional_integer(key, 0, INT32_MAX);
  if (!v) return std::nullopt;
  return static_cast<int32_t>(*v);
}

LoadedModel open_gguf(const std::string& path) {
  LoadedModel m;
  m.path = path;
  m.format = ModelFormat::Gguf;
  auto file = std::make_shared<const GgufFile>(path);
  m.config = model_config_from_gguf(*file);
  m.weights = open_gguf_weights(file);
  m.pooling = pooling_config_from_gguf(*file);
  GenerationDefaults& g = m.generation;
  auto id = [&](const char* key) -> std::optional<int32_t> {
    const int64_t v = file->get_int(key, -1);
    if (v < 0 || v > INT32_MAX) return std::nullopt;
    return static_cast<int32_t>(v);
  };
  g.bos_token_id = id("tokenizer.ggml.bos_token_id");
  g.pad_token_id = id("tokenizer.ggml.padding_token_id");
  if (auto eos = id("tokenizer.ggml.eos_token_id")) g.eos_token_ids.push_back(*eos);
  if (auto eot = id("tokenizer.ggml.eot_token_id"); eot && (g.eos_token_ids.empty() || *eot != g.eos_token_ids[0]))
    g.eos_token_ids.push_back(*eot);
  m.gguf = std::move(file);
  return m;
}

LoadedModel open_hf_dir(const fs::path& dir, const std::string& path) {
  LoadedModel m;
  m.path = path;
  m.format = ModelFormat::HfDirectory;
  const fs::path config_path = dir / "config.json";
  m.config = model_config_from_hf_file(config_path.string());
  const fs::path gen_path = dir / "generation_config.json";
  std::error_code ec;
  if (fs::exists(gen_path, ec)) {
    try {
      m.generation = parse_generation_config(read_small_file(gen_path));
    } catch (const Error& e) {
      LOOM_THROW("{}: {}", gen_path.string(), e.what());
    }
  }
  if (m.generation.eos_token_ids.empty()) {
    // Older checkpoints name eos only in config.json.
    const std::string text = read_small_file(config_path);
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_object()) {
      const ConfigJson c(j, "config.json");
      add_ids(c, "eos_token_id", m.generation.eos_token_ids);
      if (!m.generation.bos_token_id) m.generation.bos_token_id = token_id(c, "bos_token_id");
    }
  }
  m.weights = open_hf_weights(dir.string());
  m.pooling = pooling_config_from_hf_dir(dir);
  return m;
}

}  // namespace

GenerationDefaults parse_generation_config(std::string_view json_text) {
  const nlohmann::json j = nlohmann::json::parse(json_text.begin(), json_text.end(), nullptr, false);
  if (j.is_discarded()) LOOM_THROW("generation_config.json: not valid JSON");
  const ConfigJson c(j, "generation_config.json");
  GenerationDefaults g;
  g.temperature = c.optional_number("temperature", 0.0, 1e6);
  g.top_p = c.optional_number("top_p", 0.0, 1.0);
  g.top_k = c.optional_integer("top_k", 0, INT32_MAX);
  g.min_p = c.optional_number("min_p", 0.0, 1.0);
  g.repetition_penalty = c.optional_number("repetition_penalty", 1e-6, 1e6);
  if (c.has("do_sample")) g.do_sample = c.boolean("do_sample", false);
  g.max_new_tokens = c.optional_integer("max_new_tokens", 0, INT32_MAX);
  g.bos_token_id = token_id(c, "bos_token_id");
  g.pad_token_id = token_id(c, "pad_token_id");
  add_ids(c, "eos_token_id", g.eos_token_ids);
  return g;
}

LoadedModel open_model(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  const fs::file_status st = fs::status(p, ec);
  if (ec || !fs::exists(st)) LOOM_THROW("no such file or directory: {}", path);
  if (fs::is_directory(st)) {
    if (!fs::exists(p / "config.json", ec))
      LOOM_THROW("{} is not a model directory (it has no config.json)", path);
    return open_hf_dir(p, path);
  }
  if (!fs::is_regular_file(st)) LOOM_THROW("{} is not a GGUF file or model directory", path);
  if (has_gguf_magic(p)) return open_gguf(path);
  if (p.filename() == "config.json") return open_hf_dir(p.has_parent_path() ? p.parent_path() : fs::path("."), path);
  LOOM_THROW("{} is not a GGUF file or model directory", path);
}

}  // namespace loom
