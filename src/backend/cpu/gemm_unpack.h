// Per weight type, how a GGUF block maps onto the GEMM's panels (gemm.h):
// kUnit values per block, unsigned values u in order (scalar), and the f32
// scale s and bias b of each sub-block, so that w = s * (u - kOffset) + b.
// The SIMD packers use the same scales and offsets and only unpack u faster.
#pragma once

#include <cstdint>

#include "backend/cpu/gemm.h"
#include "backend/cpu/quant_blocks.h"
#include "core/half.h"

namespace loom::cpu::gemm {
// Internal linkage, as for every header of the per-ISA files (README.md).
namespace {

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  __builtin_memcpy(&v, p, 4);
  return v;
}

// Q8_0: u = q + 128, or the signed q itself where the kernels take it signed.
struct UnpackQ8_0 {
  using Block = BlockQ8_0;
  static constexpr int kUnit = kQK, kSub = 32, kOffset = 128;
  static constexpr bool kBias = false;
  static void scales(const Block& b, float* s, float*) { s[0] = f16_to_f32(b.d); }
  static void values(const Block& b, int, bool is_signed, uint8_t* u) {
    for (int l = 0; l < kQK; ++l) u[l] = static_cast<uint8_t>(b.qs[l] + (is_signed ? 0 : 128));
  }
};

template <class B, int kOff, bool kMin, bool kFive>
struct Unpack32 {
  using Block = B;
  static constexpr int kUnit = kQK, kSub = 32, kOffset = kOff;
  static constexpr bool kBias = kMin;
  static void scales(const Block& b, float* s, float* bias) {
    s[0] = f16_to_f32(b.d);
    if constexpr (kMin) bias[0] = f16_to_f32(b.m);
  }
  static void values(const Block& b, int, bool, uint8_t* u) {
    uint32_t qh = 0;
    if constexpr (kFive) qh = load_u32(b.qh);
    for (int l = 0; l < kQK / 2; ++l) {
      u[l] = static_cast<uint8_t>((b.qs[l] & 0xF) | (((qh >> l) & 1) << 4));
      u[l + 16] = static_cast<uint8_t>((b.qs[l] >> 4) | (((qh >> (l + 16)) & 1) << 4));
    }
  }
};
using UnpackQ4_0 = Unpack32<BlockQ4_0, 8, false, false>;
using UnpackQ4_1 = Unpack32<BlockQ4_1, 0, true, false>;
using UnpackQ5_0 = Unpack32<BlockQ5_0, 16, false, true>;
using UnpackQ5_1 = Unpack32<BlockQ5_1, 0, true, true>;

// Q4_K / Q5_K: 8 sub-blocks of 32, s = d * sc_j, b = -dmin * m_j.
template <class B, bool kFive>
struct UnpackK45 {
  using Block = B;
  static constexpr int kUnit = kQKK, kSub = 32, kOffset = 0;
  static constexpr bool kBias = true;
  static void scales(const Block& b, float* s, float* bias) {
    const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      k_scale_min(b.scales, j, sc, m);
      s[j] = d * static_cast<float>(sc);
      bias[j] = -dmin * static_cast<float>(m);
    }
  }
  // Values 32j .. 32j + 31.
  static void values(const Block& b, int j, bool, uint8_t* u) {
    const uint8_t* q = b.qs + 32 * (j / 2);
    for (int l = 0; l < 32; ++l) {
      int v = (q[l] >> (4 * (j & 1))) & 0xF;
      if constexpr (kFive) v |= ((b.qh[l] >> j) & 1) << 4;
      u[l] = static_cast<uint8_t>(v);
    }
  }
};
using UnpackQ4_K = UnpackK45<BlockQ4_K, false>;
using UnpackQ5_K = UnpackK45<BlockQ5_K, true>;

// Q6_K: 16 sub-blocks of 16, s = d * sc_j, u = q in [0, 63], offset 32.
struct UnpackQ6_K {
  using Block = BlockQ6_K;
  static constexpr int kUnit = kQKK, kSub = 16, kOffset = 32;
  static constexpr bool kBias = false;
  static void scales(const Block& b, float* s, float*) {
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < 16; ++j) s[j] = d * static_cast<float>(b.scales[j]);
  }
  // Values 32j .. 32j + 31: half h = j / 4 of the block, quarter t = j % 4.
  static void values(const Block& b, int j, bool, uint8_t* u) {
    const int h = j / 4, t = j % 4;
    const uint8_t* ql = b.ql + 64 * h + 32 * (t & 1);
    const uint8_t* qh = b.qh + 32 * h;
    for (int l = 0; l < 32; ++l)
      u[l] =
          static_cast<uint8_t>(((ql[l] >> (4 * (t >> 1))) & 0xF) | (((qh[l] >> (2 * t)) & 3) << 4));
  }
};

// The layout every ISA shares, except where Q8_0 is taken signed.
inline bool layout_of(DType type, bool q8_signed, QuantLayout& l) {
  auto set = [&](int sub, int offset, bool bias) {
    l = QuantLayout{sub, offset, bias, false};
    return true;
  };
  switch (type) {
    case DType::Q8_0:
    case DType::Q8_0_R16:  // the GEMM packs its rows as Q8_0's (gemm.cpp)
      if (q8_signed) {
        l = QuantLayout{32, 0, false, true};
        return true;
      }
      return set(32, 128, false);
    case DType::Q4_0:
      return set(32, 8, false);
    case DType::Q4_1:
      return set(32, 0, true);
    case DType::Q5_0:
    case DType::Q5_0_R16:
      return set(32, 16, false);
    case DType::Q5_1:
      return set(32, 0, true);
    case DType::Q4_K:
    case DType::Q4_K_R16:
      return set(32, 0, true);
    case DType::Q5_K:
    case DType::Q5_K_R16:
      return set(32, 0, true);
    case DType::Q6_K:
    case DType::Q6_K_R16:
      return set(16, 32, false);
    default:
      return false;
  }
}

// Calls fn(Unpack{}) with the unpacker of `type` (a quantised type with a layout).
template <class Fn>
void with_unpacker(DType type, Fn&& fn) {
  switch (type) {
    case DType::Q8_0:
      return fn(UnpackQ8_0{});
    case DType::Q4_0:
      return fn(UnpackQ4_0{});
    case DType::Q4_1:
      return fn(UnpackQ4_1{});
    case DType::Q5_0:
      return fn(UnpackQ5_0{});
    case DType::Q5_1:
      return fn(UnpackQ5_1{});
    case DType::Q4_K:
      return fn(UnpackQ4_K{});
    case DType::Q5_K:
      return fn(UnpackQ5_K{});
    case DType::Q6_K:
      return fn(UnpackQ6_K{});
    default:
      break;
  }
}

// Scales and biases of rows [0, rows) into the panel ([kc / sub][nr]), zero
// for rows past the end.
template <class U>
void pack_scales(const uint8_t* w, int64_t row_bytes, int rows, int64_t k0, int64_t kc,
                 QuantPanel& p) {
  constexpr int kSubs = U::kUnit / U::kSub;  // sub-blocks per block
  const int64_t nblocks = kc / U::kUnit;
  for (int c = 0; c < p.nr; ++c) {
    if (c >= rows) {
      for (int64_t j = 0; j < nblocks * kSubs; ++j) {
        p.scale[j * p.nr + c] = 0;
        if (U::kBias) p.bias[j * p.nr + c] = 0;
      }
      continue;
    }
    const auto* blocks =
        reinterpret_cast<const typename U::Block*>(w + c * row_bytes) + k0 / U::kUnit;
    for (int64_t b = 0; b < nblocks; ++b) {
      float s[kSubs], bias[kSubs] = {};
      U::scales(blocks[b], s, bias);
      for (int j = 0; j < kSubs; ++j) {
        p.scale[(b * kSubs + j) * p.nr + c] = s[j];
        if (U::kBias) p.bias[(b * kSubs + j) * p.nr + c] = bias[j];
      }
    }
  }
}

}  // namespace
}  // namespace loom::cpu::gemm
