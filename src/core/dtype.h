// Element types of tensors: plain floats and integers, FP8 (E4M3, whose
// scales travel beside the tensor), and the GGUF block-quantised formats that
// weights may keep in memory. Quantised types store
// `block_elems` values in `block_bytes` bytes along a row (the last dimension).
#pragma once

#include <cstdint>
#include <string_view>

namespace loom {

enum class DType : uint8_t {
  F32,
  F16,
  BF16,
  I8,
  I32,
  I64,
  Q8_0,  // 32 values: f16 scale + 32 x int8
  Q4_0,  // 32 values: f16 scale + 16 bytes of nibbles
  Q4_K,  // 256 values: super-block with 6-bit sub-scales
  Q5_K,
  Q6_K,
  Q4_1,  // 32 values: f16 scale, f16 min + 16 bytes of nibbles
  Q5_0,  // 32 values: f16 scale + 4 bytes of high bits + 16 bytes of nibbles
  Q5_1,  // 32 values: f16 scale, f16 min + 4 bytes of high bits + 16 bytes of nibbles
  F8_E4M3,  // 8-bit float: 1 sign, 4 exponent (bias 7), 3 mantissa bits; max 448, no inf (core/fp8.h)
  // Q8_0, Q5_0, Q4_K, Q5_K, Q6_K with every 16 rows interleaved block by block
  // (quant/interleave.h): the same bytes per row, in the order the CPU's
  // kernels read them. Made by the CPU backend at load; never in a file.
  Q8_0_R16,
  Q5_0_R16,
  Q4_K_R16,
  Q5_K_R16,
  Q6_K_R16,
};

struct DTypeInfo {
  std::string_view name;
  int64_t block_elems;  // 1 for plain types
  int64_t block_bytes;  // bytes of one block (element size for plain types)
  bool quantized;
  // Rows stored together (interleaved types: 16); a row slice starts at a multiple.
  int64_t row_group = 1;
};

const DTypeInfo& dtype_info(DType t);
inline std::string_view dtype_name(DType t) { return dtype_info(t).name; }
inline bool is_quantized(DType t) { return dtype_info(t).quantized; }

// Bytes taken by `elems` values of type t laid out in one row. Throws when
// elems is negative, not a whole number of blocks, or the size overflows.
int64_t row_bytes(DType t, int64_t elems);

}  // namespace loom
