// Test helper: builds small GGUF files in memory, valid or deliberately
// broken, so tests and the fuzz seed generator need no external tools.
// Header-only; used by tests/loader/test_gguf.cpp and fuzz/make_seeds.cpp.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "model/loader/gguf.h"

namespace loom::testing {

// Little-endian byte appender.
struct Bytes {
  std::vector<uint8_t> buf;

  template <class T>
  Bytes& put(T v) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &v, sizeof(T));
    buf.insert(buf.end(), tmp, tmp + sizeof(T));
    return *this;
  }
  Bytes& u8(uint8_t v) { return put(v); }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& str(const std::string& s) {
    u64(s.size());
    buf.insert(buf.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& raw(const std::vector<uint8_t>& b) {
    buf.insert(buf.end(), b.begin(), b.end());
    return *this;
  }
  void pad_to(uint64_t alignment) {
    while (buf.size() % alignment) buf.push_back(0);
  }
};

// Encodes one metadata value (without its type tag) as GGUF stores it.
inline void encode_value(Bytes& b, const GgufValue& v) {
  switch (v.type) {
    case GgufType::U8: b.put<uint8_t>(static_cast<uint8_t>(std::get<uint64_t>(v.value))); break;
    case GgufType::I8: b.put<int8_t>(static_cast<int8_t>(std::get<int64_t>(v.value))); break;
    case GgufType::U16: b.put<uint16_t>(static_cast<uint16_t>(std::get<uint64_t>(v.value))); break;
    case GgufType::I16: b.put<int16_t>(static_cast<int16_t>(std::get<int64_t>(v.value))); break;
    case GgufType::U32: b.put<uint32_t>(static_cast<uint32_t>(std::get<uint64_t>(v.value))); break;
    case GgufType::I32: b.put<int32_t>(static_cast<int32_t>(std::get<int64_t>(v.value))); break;
    case GgufType::U64: b.put<uint64_t>(std::get<uint64_t>(v.value)); break;
    case GgufType::I64: b.put<int64_t>(std::get<int64_t>(v.value)); break;
    case GgufType::F32: b.put<float>(static_cast<float>(std::get<double>(v.value))); break;
    case GgufType::F64: b.put<double>(std::get<double>(v.value)); break;
    case GgufType::BOOL: b.put<uint8_t>(std::get<bool>(v.value) ? 1 : 0); break;
    case GgufType::STRING: b.str(std::get<std::string>(v.value)); break;
    case GgufType::ARRAY: {
      const auto& a = std::get<GgufArray>(v.value);
      b.u32(static_cast<uint32_t>(a.elem_type));
      b.u64(a.values.size());
      for (const auto& e : a.values) encode_value(b, e);
      break;
    }
  }
}

inline GgufValue gv_u(GgufType t, uint64_t v) { return GgufValue{t, v}; }
inline GgufValue gv_i(GgufType t, int64_t v) { return GgufValue{t, v}; }
inline GgufValue gv_f(GgufType t, double v) { return GgufValue{t, v}; }
inline GgufValue gv_bool(bool v) { return GgufValue{GgufType::BOOL, v}; }
inline GgufValue gv_str(std::string s) { return GgufValue{GgufType::STRING, std::move(s)}; }
inline GgufValue gv_arr(GgufType elem, std::vector<GgufValue> values) {
  return GgufValue{GgufType::ARRAY, GgufArray{elem, std::move(values)}};
}

struct GgufTensorSpec {
  std::string name;
  std::vector<uint64_t> ne;  // innermost first, as GGUF stores it
  uint32_t ggml_type = 0;
  std::vector<uint8_t> data;            // bytes placed in the data section
  std::optional<uint64_t> offset;       // default: next aligned position
};

// Builds a GGUF file. Counts, version and alignment padding can be overridden
// to produce broken files.
struct GgufWriter {
  uint32_t version = 3;
  uint64_t alignment = 32;  // used for padding; add general.alignment to change the file's
  std::vector<std::pair<std::string, GgufValue>> kvs;
  std::vector<GgufTensorSpec> tensors;
  std::optional<uint64_t> n_kv_override, n_tensors_override;

  GgufWriter& kv(std::string key, GgufValue v) {
    kvs.emplace_back(std::move(key), std::move(v));
    return *this;
  }
  GgufWriter& tensor(std::string name, std::vector<uint64_t> ne, uint32_t type,
                     std::vector<uint8_t> data) {
    tensors.push_back({std::move(name), std::move(ne), type, std::move(data), std::nullopt});
    return *this;
  }

  std::vector<uint8_t> build() const {
    Bytes b;
    b.u32(0x46554747).u32(version);
    b.u64(n_tensors_override.value_or(tensors.size()));
    b.u64(n_kv_override.value_or(kvs.size()));
    for (const auto& [k, v] : kvs) {
      b.str(k);
      b.u32(static_cast<uint32_t>(v.type));
      encode_value(b, v);
    }
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const auto& t : tensors) {
      const uint64_t off = t.offset.value_or(next);
      offsets.push_back(off);
      next = (off + t.data.size() + alignment - 1) / alignment * alignment;
      b.str(t.name);
      b.u32(static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) b.u64(d);
      b.u32(t.ggml_type);
      b.u64(off);
    }
    if (tensors.empty()) return b.buf;
    b.pad_to(alignment);
    const size_t data_start = b.buf.size();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const size_t at = data_start + offsets[i];
      if (b.buf.size() < at + tensors[i].data.size()) b.buf.resize(at + tensors[i].data.size());
      std::memcpy(b.buf.data() + at, tensors[i].data.data(), tensors[i].data.size());
    }
    return b.buf;
  }
};

// A small valid file with a little of everything: used as a seed and as the
// base of truncation tests.
inline std::vector<uint8_t> small_valid_gguf(uint32_t version = 3) {
  GgufWriter w;
  w.version = version;
  w.kv("general.architecture", gv_str("llama"));
  w.kv("llama.block_count", gv_u(GgufType::U32, 1));
  w.kv("llama.rope.freq_base", gv_f(GgufType::F32, 10000.0));
  w.kv("tokenizer.ggml.tokens", gv_arr(GgufType::STRING, {gv_str("<s>"), gv_str("a"), gv_str("b")}));
  w.kv("tokenizer.ggml.scores",
       gv_arr(GgufType::F32, {gv_f(GgufType::F32, 0), gv_f(GgufType::F32, -1), gv_f(GgufType::F32, -2)}));
  w.tensor("token_embd.weight", {4, 3}, 0, std::vector<uint8_t>(4 * 3 * 4, 1));
  w.tensor("blk.0.attn_q.weight", {32, 2}, 8, std::vector<uint8_t>(34 * 2, 2));
  return w.build();
}

}  // namespace loom::testing
