// GgufFile: a read-only, memory-mapped GGUF (v2/v3) model file. Everything read
// from the file is validated (counts, string lengths, offsets, alignment,
// tensor extents, overflow) before use; a truncated, corrupt or hostile file
// raises loom::Error naming the problem, never crashes or allocates hugely.
// Thread-safe for concurrent reads after construction.
// Byte order: little-endian files on a little-endian host only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/tensor.h"

namespace loom {

// GGUF metadata value types (gguf_metadata_value_type).
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};

// Name of a metadata value type ("u32", "string", ...); "?" when out of range.
std::string_view gguf_type_name(GgufType t);

// Name of a ggml tensor type id ("Q4_K", "IQ2_XXS", ...), or an empty view
// when the id was never assigned by ggml.
std::string_view ggml_type_name(uint32_t ggml_type);
// The loom DType that stores a ggml tensor type, or nullopt when loom does not
// support it (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
// Q5_K, Q6_K).
std::optional<DType> dtype_from_ggml_type(uint32_t ggml_type);
// The inverse; throws loom::Error for a DType that has no GGUF tensor type here.
uint32_t ggml_type_from_dtype(DType dtype);

// Bounds on what a file may claim, checked before anything is allocated.
inline constexpr int kGgufMaxArrayDepth = 8;             // nested metadata arrays
inline constexpr uint64_t kGgufMaxArrayValues = 1 << 22;  // array elements, whole file
inline constexpr int kGgufMaxDims = 4;

struct GgufValue;
struct GgufArray {
  GgufType elem_type;
  std::vector<GgufValue> values;
};

struct GgufValue {
  GgufType type;
  std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> value;

  // Typed accessors; each throws loom::Error when the value has another kind.
  int64_t as_int() const;              // any integer type (u64 above INT64_MAX throws)
  double as_float() const;             // any float or integer type
  bool as_bool() const;
  const std::string& as_string() const;
  const GgufArray& as_array() const;
};

struct GgufTensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;  // outermost first (GGUF stores innermost first; reversed here)
  uint64_t offset;             // from the start of the data section
  uint64_t nbytes;
};

class GgufFile {
 public:
  // Opens and validates `path`. Limits bound what the file may claim before
  // anything is allocated from it.
  // Error messages start with `path`.
  explicit GgufFile(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  // Parses from a caller-owned buffer (no mmap); used by the fuzzer and tests.
  // The buffer must outlive the GgufFile and every Tensor taken from it
  // (those Tensors have no owner). `label` starts error messages.
  static std::unique_ptr<GgufFile> from_memory(const void* data, size_t size,
                                               std::string_view label = "<memory>");

  const std::string& path() const { return path_; }  // or the from_memory label
  uint64_t data_offset() const { return data_offset_; }  // start of the data section

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }

  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;  // nullptr when absent
  // Convenience: typed lookups with a default when the key is absent.
  int64_t get_int(std::string_view key, int64_t fallback) const;
  double get_float(std::string_view key, double fallback) const;
  std::string get_string(std::string_view key, std::string_view fallback = {}) const;
  bool get_bool(std::string_view key, bool fallback) const;
  // String array (e.g. tokenizer.ggml.tokens); throws if present with another type.
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<double> get_float_array(std::string_view key) const;  // numeric arrays
  std::vector<int64_t> get_int_array(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  // A CPU Tensor viewing the mapped bytes (kept alive by the returned owner).
  // The memory is read-only: writing through the Tensor faults.
  Tensor tensor(const GgufTensorInfo& info) const;
  // tensor(*find_tensor(name)), throwing loom::Error when there is none.
  Tensor tensor(std::string_view name) const;

 private:
  GgufFile() = default;
  void parse(const uint8_t* data, size_t size);

  std::string path_;
  std::shared_ptr<void> mapping_;  // keeps the mmap (or nothing, from_memory) alive
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace loom
