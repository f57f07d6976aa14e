// Conversion of GGUF block-quantised rows (and f16/bf16/f32 rows) to f32, and
// simple round-to-nearest quantisers producing the same block layouts. The
// layouts are ggml's, read bit-exactly (see gguf_blocks.h). Shared by the CPU
// backend and the CUDA weight upload. Any thread may call these; they touch
// only the memory passed in.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace loom::quant {

// dst[0, n) = the n values stored at src as one row of `type`. n must be a whole
// number of blocks of `type`. Accepts F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, Q4_K, Q5_K, Q6_K.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

// Writes n values as one row of `type` at dst (row_bytes(type, n) bytes). Plain
// round-to-nearest per block (no importance search as in llama-quantize):
// meant for tests, tools and KV caches, not for producing release models.
void quantize_row(DType type, const float* src, void* dst, int64_t n);

}  // namespace loom::quant
