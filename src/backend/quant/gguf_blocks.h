// Memory layouts of ggml's quantised blocks (GGUF file format; bit-exact): the
// block structs every reader of quantised weights shares (the CPU kernels, the
// dequantisers of quant.cpp).
#pragma once

#include <cstdint>

namespace loom::quant {

constexpr int kQK = 32;    // values per Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 block
constexpr int kQKK = 256;  // values per K-quant super-block

struct BlockQ8_0 {  // x = d * qs
  uint16_t d;       // f16
  int8_t qs[kQK];
};
struct BlockQ4_0 {  // x = d * (q - 8); low nibbles are values 0..15, high ones 16..31
  uint16_t d;
  uint8_t qs[kQK / 2];
};
struct BlockQ4_1 {  // x = d * q + m, q in [0, 15]; nibbles ordered as Q4_0
  uint16_t d, m;
  uint8_t qs[kQK / 2];
};
// Five-bit values: the low four bits as Q4_0's nibbles, the fifth bit of value i
// is bit i of qh (read as a little-endian uint32).
struct BlockQ5_0 {  // x = d * (q - 16), q in [0, 31]
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ5_1 {  // x = d * q + m, q in [0, 31]
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
// 8 sub-blocks of 32 with 6-bit scale sc and min m: x = d*sc*q - dmin*m, q in [0, 15].
// Each group of 64 values keeps its first 32 in low nibbles of qs[32g..32g+31], the
// next 32 in the high nibbles.
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[kQKK / 2];
};
// As Q4_K with a fifth bit: value 32g+l of group g (l < 32) takes bit 2g of qh[l],
// value 32g+32+l bit 2g+1.
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
// 16 sub-blocks of 16 with int8 scales: x = d * sc * (q - 32), q in [0, 63].
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18);

static_assert(sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block.
[[gnu::always_inline]] inline void k_scale_min(const uint8_t* s, int j, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Sixteen rows interleaved (DType::*_R16, quant/interleave.h): rows 16g ..
// 16g + 15 form group g, and group g's block b holds block b of each of its
// rows (lane i = row 16g + i), with the values laid out in chunks of 64 bytes
// that hold 4 bytes of each of the 16 rows, lane by lane (what one 512-bit
// integer dot with the rows as lanes reads, or two 256-bit ones of 8 rows
// each): chunk c's bytes 4i .. 4i + 3 are lane i's bytes 4c .. 4c + 3 of the
// same array. Per-row fields (scales) are kept per lane. A group's blocks
// follow one another and take exactly its 16 rows' bytes, so group g starts
// 16 * g rows' bytes into the tensor, as in the plain layout.
struct BlockQ8_0x16 {
  uint16_t d[16];    // lane i's f16 scale
  int8_t qs[8][64];  // chunks of qs
};
struct BlockQ5_0x16 {
  uint16_t d[16];
  uint64_t qh[8];     // bit 4i + j of qh[k] = lane i's fifth bit of value 4k + j
  uint8_t qs[4][64];  // chunks of qs (values 4k + j in low nibbles, 16 + 4k + j in high ones)
};
struct BlockQ4_Kx16 {
  uint16_t d[16], dmin[16];
  uint8_t scales[12][16];  // scales[b][i] = lane i's packed scale / min byte b
  uint8_t qs[32][64];      // chunks of qs
};
struct BlockQ5_Kx16 {
  uint16_t d[16], dmin[16];
  uint8_t scales[12][16];
  uint8_t qh[8][64];  // chunks of qh
  uint8_t qs[32][64];
};
struct BlockQ6_Kx16 {
  uint16_t d[16];
  int8_t scales[16][16];  // scales[j][i] = lane i's scales[j]
  uint8_t ql[32][64];     // chunks of ql
  uint8_t qh[16][64];     // chunks of qh
};
static_assert(sizeof(BlockQ8_0x16) == 16 * 34 && sizeof(BlockQ5_0x16) == 16 * 22);
static_assert(sizeof(BlockQ4_Kx16) == 16 * 144 && sizeof(BlockQ5_Kx16) == 16 * 176 &&
              sizeof(BlockQ6_Kx16) == 16 * 210);

}  // namespace loom::quant
