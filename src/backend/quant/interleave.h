// Sixteen weight rows interleaved block by block (DType::Q8_0_R16, Q5_0_R16,
// Q4_K_R16, Q5_K_R16, Q6_K_R16; the layouts are the Block*x16 structs of
// gguf_blocks.h): a pure permutation of a matrix's bytes, so that a kernel
// with the rows as the lanes of a vector reads each block's values without
// transposing them. The CPU backend interleaves such weights at load (its
// kernels read them this way) and reads single rows back for embedding
// lookups.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace loom::quant {

// The interleaved type of `type` (Q8_0 -> Q8_0_R16, ..., Q6_K -> Q6_K_R16), or
// `type` itself where there is none.
DType interleaved_type(DType type);
// Whether `type` is interleaved, and the plain type it interleaves.
bool is_interleaved(DType type);
DType plain_type(DType type);  // `type` itself for a plain type

// Rows of an interleaved tensor come in groups of this many (its dtype's
// row_group); a row slice of one starts at a group and may end inside one.
constexpr int64_t kInterleaveRows = 16;

// src: 16 rows of the plain type, row_bytes apart; dst: the group they make
// (16 * row_bytes bytes), in `type` (interleaved). row_bytes holds a whole
// number of blocks.
void interleave_group(DType type, const uint8_t* src, int64_t row_bytes, uint8_t* dst);
// Lane `lane` (0..15) of the group at `group` (of `type`, interleaved), blocks
// [b0, b1), as the plain row's bytes of those blocks at dst.
void deinterleave_row(DType type, const uint8_t* group, int lane, int64_t b0, int64_t b1,
                      uint8_t* dst);

}  // namespace loom::quant
