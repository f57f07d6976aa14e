// PoolingType: how a prompt's per-token hidden states become one embedding
// vector. Shared vocabulary of the model (what its files say: GGUF
// `pooling_type`, sentence-transformers' 1_Pooling/config.json) and the
// engine's pooling requests.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace loom {

enum class PoolingType : uint8_t {
  Last,  // the last prompt token's state (decoder embedding models: Qwen3-Embedding, e5-mistral)
  Mean,  // the average over every prompt token
  Cls,   // the first prompt token's state
};

std::string_view pooling_type_name(PoolingType type);  // "last", "mean", "cls"
std::optional<PoolingType> parse_pooling_type(std::string_view name);

// Prompt positions [begin, end) a type pools over, for a prompt of `len` tokens.
struct PoolingRange {
  int32_t begin = 0;
  int32_t end = 0;
};
PoolingRange pooling_range(PoolingType type, int32_t len);

}  // namespace loom
