// Opening a model: a .gguf file or an HF directory (config.json +
// safetensors) becomes a LoadedModel (config, weights, generation defaults);
// a Transformer built from it runs forward steps (model/transformer.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/pooling_config.h"
#include "model/transformer.h"

namespace loom {

class GgufFile;
class WeightSource;

// Sampling defaults the model ships with (HF generation_config.json, or GGUF
// tokenizer metadata for the special tokens). Absent values: not specified.
struct GenerationDefaults {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<bool> do_sample;
  std::optional<int64_t> max_new_tokens;
  std::optional<int32_t> bos_token_id;
  std::optional<int32_t> pad_token_id;
  std::vector<int32_t> eos_token_ids;  // generation stops at any of these
};

enum class ModelFormat { Gguf, HfDirectory };

struct LoadedModel {
  std::string path;                      // as given to open_model
  ModelFormat format = ModelFormat::Gguf;
  ModelConfig config;
  std::shared_ptr<const GgufFile> gguf;  // the file (also holds the tokenizer); null for HF
  std::shared_ptr<const WeightSource> weights;
  GenerationDefaults generation;
  PoolingConfig pooling;                 // how embeddings pool (pooling_config.h)
};

// Opens `path`: a .gguf file, an HF model directory, or that directory's
// config.json. Throws loom::Error with one clear line ("no such file or
// directory: ...", "... is not a GGUF file or model directory", bad config
// values, unsupported architecture...).
LoadedModel open_model(const std::string& path);

// generation_config.json (parsed text) as GenerationDefaults; values are
// type-checked, bad ones throw loom::Error.
GenerationDefaults parse_generation_config(std::string_view json_text);

}  // namespace loom
