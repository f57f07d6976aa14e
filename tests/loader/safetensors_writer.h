// Test helper: builds small safetensors files in memory (valid or broken) for
// tests/loader/test_safetensors.cpp and fuzz/make_seeds.cpp.
#pragma once

#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace loom::testing {

struct StTensorSpec {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> data;
};

// 8-byte little-endian length, then the header text.
inline std::vector<uint8_t> length_prefixed(const std::string& text) {
  std::string bytes(8, '\0');
  const uint64_t n = text.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes += text;
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

// Lays tensors out back to back, in the given order; the header is padded with
// spaces to a multiple of 8 bytes as the reference writer does.
inline std::vector<uint8_t> build_safetensors(const std::vector<StTensorSpec>& tensors,
                                              const nlohmann::json& metadata = nullptr) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  while (text.size() % 8) text += ' ';
  std::vector<uint8_t> out = length_prefixed(text);
  for (const auto& t : tensors) out.insert(out.end(), t.data.begin(), t.data.end());
  return out;
}

// A file from a raw header text and a data section.
inline std::vector<uint8_t> raw_safetensors(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> out = length_prefixed(header);
  out.resize(out.size() + data_bytes);
  return out;
}

inline std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

inline std::vector<uint8_t> small_valid_safetensors() {
  return build_safetensors({{"model.embed_tokens.weight", "F32", {3, 2}, f32_bytes({1, 2, 3, 4, 5, 6})},
                            {"model.norm.weight", "BF16", {2}, std::vector<uint8_t>(4, 0x3f)},
                            {"model.layers.0.self_attn.q_proj.bias", "F16", {2}, std::vector<uint8_t>(4)}},
                           {{"format", "pt"}});
}

}  // namespace loom::testing
