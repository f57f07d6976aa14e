// How a model pools its hidden states into an embedding, as its files say:
// GGUF `{arch}.pooling_type` (llama.cpp's enum) or, in an HF directory,
// sentence-transformers' modules.json naming a Pooling module whose
// config.json sets one pooling_mode_*. Without either, a decoder pools its
// last token (as Qwen3-Embedding and e5-mistral do).
#pragma once

#include <filesystem>
#include <string>

#include "core/pooling.h"

namespace loom {

class GgufFile;

struct PoolingConfig {
  PoolingType type = PoolingType::Last;
  std::string source = "default for a decoder";  // where `type` came from, for the start-up log
};

// Throws loom::Error for a pooling the engine does not implement (max,
// weighted mean, several modes at once, reranking heads) or a malformed file.
PoolingConfig pooling_config_from_gguf(const GgufFile& file);
PoolingConfig pooling_config_from_hf_dir(const std::filesystem::path& dir);

}  // namespace loom
