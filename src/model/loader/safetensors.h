// SafetensorsFile: a read-only, memory-mapped .safetensors file. The header
// (8-byte little-endian length, then JSON) is bounded and parsed with limits;
// every tensor's dtype, shape and data_offsets are validated against the file
// before use. A truncated, corrupt or hostile file raises loom::Error naming
// the file and the problem. Thread-safe for concurrent reads after construction.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace loom {

inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100ull << 20;
inline constexpr int kSafetensorsMaxDims = 8;

// "F32" -> DType::F32 ... (F32, F16, BF16, F8_E4M3, I8, I32, I64); nullopt otherwise.
std::optional<DType> dtype_from_safetensors(std::string_view dtype);

struct SafetensorsTensorInfo {
  std::string name;             // as stored (HF naming)
  DType dtype;
  std::vector<int64_t> shape;   // outermost first, as stored; {} for a scalar
  uint64_t offset;              // from the start of the data section (after the header)
  uint64_t nbytes;
};

class SafetensorsFile {
 public:
  // Opens and validates `path`; error messages start with it.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // Parses a caller-owned buffer (no mmap), which must outlive the object and
  // its Tensors (they get no owner). Used by the fuzzer and tests.
  static std::unique_ptr<SafetensorsFile> from_memory(const void* data, size_t size,
                                                      std::string_view label = "<memory>");

  const std::string& path() const { return path_; }
  uint64_t data_offset() const { return data_offset_; }
  // Tensors sorted by name.
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
  const SafetensorsTensorInfo* find_tensor(std::string_view name) const;  // nullptr when absent
  // A CPU Tensor viewing the mapped (read-only) bytes; the owner keeps the
  // mapping alive after this object is gone.
  Tensor tensor(const SafetensorsTensorInfo& info) const;
  Tensor tensor(std::string_view name) const;

 private:
  SafetensorsFile() = default;
  void parse(const uint8_t* data, size_t size);

  std::string path_;
  std::shared_ptr<void> mapping_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  uint64_t data_offset_ = 0;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
};

}  // namespace loom
