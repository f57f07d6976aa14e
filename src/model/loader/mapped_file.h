// Read-only memory mapping of a whole file, shared by the GGUF and
// safetensors readers. The mapping lives as long as any copy of `owner`
// (Tensors viewing the file hold one), so it outlives the reader object.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace loom {

struct MappedFile {
  std::shared_ptr<void> owner;  // unmaps when the last copy goes
  const uint8_t* data = nullptr;
  size_t size = 0;
};

// Maps `path` read-only (PROT_READ, MAP_PRIVATE). Throws loom::Error naming
// the path when it cannot be opened, is not a regular file, or is empty.
MappedFile map_file(const std::string& path);

// Reads a whole small file (e.g. a JSON index) into memory; throws when it
// cannot be read or is larger than max_bytes.
std::string read_small_file(const std::string& path, size_t max_bytes);

}  // namespace loom
