// Scalar dequantisers and round-to-nearest quantisers for the GGUF block formats.
// Dequantisation follows ggml's layouts exactly; quantisation only needs to
// produce valid blocks (it is used by tests, tools and KV caches).
#include "backend/quant/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/quant/gguf_blocks.h"
#include "core/error.h"
#include "core/half.h"

namespace loom::quant {
namespace {

void dequant_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(b[i].d);
    for (int l = 0; l < kQK; ++l) y[l] = d * static_cast<float>(b[i].qs[l]);
  }
}

void dequant_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(b[i].d);
    for (int l = 0; l < kQK / 2; ++l) {
      y[l] = d * static_cast<float>((b[i].qs[l] & 0xF) - 8);
      y[l + kQK / 2] = d * static_cast<float>((b[i].qs[l] >> 4) - 8);
    }
  }
}

void dequant_q4_1(const BlockQ4_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
    for (int l = 0; l < kQK / 2; ++l) {
      y[l] = d * static_cast<float>(b[i].qs[l] & 0xF) + m;
      y[l + kQK / 2] = d * static_cast<float>(b[i].qs[l] >> 4) + m;
    }
  }
}

uint32_t load_qh(const uint8_t* qh) {
  return qh[0] | (uint32_t{qh[1]} << 8) | (uint32_t{qh[2]} << 16) | (uint32_t{qh[3]} << 24);
}

// The 32 five-bit values (0..31) of a Q5_0 / Q5_1 block, in order.
void unpack_q5(const uint8_t* qh_bytes, const uint8_t* qs, int* q) {
  const uint32_t qh = load_qh(qh_bytes);
  for (int l = 0; l < kQK / 2; ++l) {
    q[l] = (qs[l] & 0xF) | static_cast<int>(((qh >> l) & 1) << 4);
    q[l + kQK / 2] = (qs[l] >> 4) | static_cast<int>(((qh >> (l + kQK / 2)) & 1) << 4);
  }
}

void dequant_q5_0(const BlockQ5_0* b, float* y, int64_t nb) {
  int q[kQK];
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(b[i].d);
    unpack_q5(b[i].qh, b[i].qs, q);
    for (int l = 0; l < kQK; ++l) y[l] = d * static_cast<float>(q[l] - 16);
  }
}

void dequant_q5_1(const BlockQ5_1* b, float* y, int64_t nb) {
  int q[kQK];
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
    unpack_q5(b[i].qh, b[i].qs, q);
    for (int l = 0; l < kQK; ++l) y[l] = d * static_cast<float>(q[l]) + m;
  }
}

void dequant_q4_k(const BlockQ4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
    const uint8_t* q = b[i].qs;
    for (int g = 0; g < 4; ++g, q += 32, y += 64) {
      int sc0, m0, sc1, m1;
      k_scale_min(b[i].scales, 2 * g, sc0, m0);
      k_scale_min(b[i].scales, 2 * g + 1, sc1, m1);
      const float d0 = d * sc0, dm0 = dmin * m0, d1 = d * sc1, dm1 = dmin * m1;
      for (int l = 0; l < 32; ++l) y[l] = d0 * (q[l] & 0xF) - dm0;
      for (int l = 0; l < 32; ++l) y[32 + l] = d1 * (q[l] >> 4) - dm1;
    }
  }
}

void dequant_q5_k(const BlockQ5_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
    const uint8_t* q = b[i].qs;
    const uint8_t* qh = b[i].qh;
    for (int g = 0; g < 4; ++g, q += 32, y += 64) {
      int sc0, m0, sc1, m1;
      k_scale_min(b[i].scales, 2 * g, sc0, m0);
      k_scale_min(b[i].scales, 2 * g + 1, sc1, m1);
      const float d0 = d * sc0, dm0 = dmin * m0, d1 = d * sc1, dm1 = dmin * m1;
      const uint8_t u0 = static_cast<uint8_t>(1u << (2 * g)),
                    u1 = static_cast<uint8_t>(2u << (2 * g));
      for (int l = 0; l < 32; ++l) y[l] = d0 * ((q[l] & 0xF) + ((qh[l] & u0) ? 16 : 0)) - dm0;
      for (int l = 0; l < 32; ++l) y[32 + l] = d1 * ((q[l] >> 4) + ((qh[l] & u1) ? 16 : 0)) - dm1;
    }
  }
}

void dequant_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(b[i].d);
    const uint8_t* ql = b[i].ql;
    const uint8_t* qh = b[i].qh;
    const int8_t* sc = b[i].scales;
    for (int h = 0; h < 2; ++h, ql += 64, qh += 32, sc += 8, y += 128) {
      for (int l = 0; l < 32; ++l) {
        const int s = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[s + 0] * q1;
        y[l + 32] = d * sc[s + 2] * q2;
        y[l + 64] = d * sc[s + 4] * q3;
        y[l + 96] = d * sc[s + 6] * q4;
      }
    }
  }
}

float max_abs(const float* x, int n) {
  float a = 0;
  for (int i = 0; i < n; ++i) a = std::max(a, std::fabs(x[i]));
  return a;
}

int nearest(float v) {
  return static_cast<int>(std::nearbyint(v));
}

void quant_q8_0(const float* x, BlockQ8_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    const float d = max_abs(x, kQK) / 127.0f;
    const float id = d > 0 ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    for (int l = 0; l < kQK; ++l)
      b[i].qs[l] = static_cast<int8_t>(std::clamp(nearest(x[l] * id), -127, 127));
  }
}

void quant_q4_0(const float* x, BlockQ4_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    // As ggml: the value of largest magnitude maps to -8, so d may be negative.
    float amax = 0, vmax = 0;
    for (int l = 0; l < kQK; ++l)
      if (std::fabs(x[l]) > amax) amax = std::fabs(x[l]), vmax = x[l];
    const float d = vmax / -8.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    for (int l = 0; l < kQK / 2; ++l) {
      const int q0 = std::clamp(nearest(x[l] * id) + 8, 0, 15);
      const int q1 = std::clamp(nearest(x[l + kQK / 2] * id) + 8, 0, 15);
      b[i].qs[l] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

// Q5_0: as Q4_0 with 32 levels (the value of largest magnitude maps to -16).
void quant_q5_0(const float* x, BlockQ5_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0, vmax = 0;
    for (int l = 0; l < kQK; ++l)
      if (std::fabs(x[l]) > amax) amax = std::fabs(x[l]), vmax = x[l];
    const float d = vmax / -16.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    uint32_t qh = 0;
    for (int l = 0; l < kQK / 2; ++l) {
      const int q0 = std::clamp(nearest(x[l] * id) + 16, 0, 31);
      const int q1 = std::clamp(nearest(x[l + kQK / 2] * id) + 16, 0, 31);
      b[i].qs[l] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= static_cast<uint32_t>(q0 >> 4) << l | static_cast<uint32_t>(q1 >> 4) << (l + kQK / 2);
    }
    for (int j = 0; j < 4; ++j) b[i].qh[j] = static_cast<uint8_t>(qh >> (8 * j));
  }
}

// Q4_1 / Q5_1: d = (max - min) / levels, m = min, q = round((x - m) / d).
template <class Block, int kLevels>
void quant_affine(const float* x, Block* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float lo = x[0], hi = x[0];
    for (int l = 1; l < kQK; ++l) lo = std::min(lo, x[l]), hi = std::max(hi, x[l]);
    const float d = (hi - lo) / kLevels;
    const float id = d > 0 ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    b[i].m = f32_to_f16(lo);
    const float m = f16_to_f32(b[i].m);
    uint32_t qh = 0;
    for (int l = 0; l < kQK / 2; ++l) {
      const int q0 = std::clamp(nearest((x[l] - m) * id), 0, kLevels);
      const int q1 = std::clamp(nearest((x[l + kQK / 2] - m) * id), 0, kLevels);
      b[i].qs[l] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= static_cast<uint32_t>(q0 >> 4) << l | static_cast<uint32_t>(q1 >> 4) << (l + kQK / 2);
    }
    if constexpr (kLevels == 31)
      for (int j = 0; j < 4; ++j) b[i].qh[j] = static_cast<uint8_t>(qh >> (8 * j));
  }
}

// Per-sub-block (scale, min) of 8 sub-blocks of 32 with `levels` steps, packed
// as Q4_K/Q5_K do. Writes d, dmin, scales and the integer levels q[256].
void quant_k_scales(const float* x, int levels, uint16_t& d_out, uint16_t& dmin_out,
                    uint8_t* scales, uint8_t* q) {
  float scale[8], min[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* v = x + 32 * j;
    float lo = 0, hi = 0;  // min is clamped to <= 0, as in ggml
    for (int l = 0; l < 32; ++l) lo = std::min(lo, v[l]), hi = std::max(hi, v[l]);
    scale[j] = (hi - lo) / levels;
    min[j] = -lo;
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, min[j]);
  }
  const float d = f16_to_f32(f32_to_f16(max_scale / 63.0f));
  const float dmin = f16_to_f32(f32_to_f16(max_min / 63.0f));
  d_out = f32_to_f16(d);
  dmin_out = f32_to_f16(dmin);
  int sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = d > 0 ? std::clamp(nearest(scale[j] / d), 0, 63) : 0;
    m[j] = dmin > 0 ? std::clamp(nearest(min[j] / dmin), 0, 63) : 0;
  }
  std::memset(scales, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      scales[j] |= static_cast<uint8_t>(sc[j]);
      scales[j + 4] |= static_cast<uint8_t>(m[j]);
    } else {
      scales[j + 4] = static_cast<uint8_t>((sc[j] & 0xF) | ((m[j] & 0xF) << 4));
      scales[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      scales[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
    }
  }
  for (int j = 0; j < 8; ++j) {
    const float ds = d * sc[j], dm = dmin * m[j];
    for (int l = 0; l < 32; ++l)
      q[32 * j + l] = static_cast<uint8_t>(
          ds > 0 ? std::clamp(nearest((x[32 * j + l] + dm) / ds), 0, levels) : 0);
  }
}

void quant_q4_k(const float* x, BlockQ4_K* b, int64_t nb) {
  uint8_t q[kQKK];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    quant_k_scales(x, 15, b[i].d, b[i].dmin, b[i].scales, q);
    for (int g = 0; g < 4; ++g)
      for (int l = 0; l < 32; ++l)
        b[i].qs[32 * g + l] = static_cast<uint8_t>(q[64 * g + l] | (q[64 * g + 32 + l] << 4));
  }
}

void quant_q5_k(const float* x, BlockQ5_K* b, int64_t nb) {
  uint8_t q[kQKK];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    quant_k_scales(x, 31, b[i].d, b[i].dmin, b[i].scales, q);
    std::memset(b[i].qh, 0, sizeof b[i].qh);
    for (int g = 0; g < 4; ++g)
      for (int l = 0; l < 32; ++l) {
        const int lo = q[64 * g + l], hi = q[64 * g + 32 + l];
        b[i].qs[32 * g + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
        b[i].qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * g)) | ((hi >> 4) << (2 * g + 1)));
      }
  }
}

void quant_q6_k(const float* x, BlockQ6_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float scale[16], max_scale = 0;
    for (int j = 0; j < 16; ++j) {
      scale[j] = max_abs(x + 16 * j, 16) / 31.0f;
      max_scale = std::max(max_scale, scale[j]);
    }
    const float d = f16_to_f32(f32_to_f16(max_scale / 127.0f));
    b[i].d = f32_to_f16(d);
    uint8_t q[kQKK];
    for (int j = 0; j < 16; ++j) {
      const int sc = d > 0 ? std::clamp(nearest(scale[j] / d), -128, 127) : 0;
      b[i].scales[j] = static_cast<int8_t>(sc);
      const float ds = d * sc;
      for (int l = 0; l < 16; ++l)
        q[16 * j + l] = static_cast<uint8_t>(
            (ds != 0 ? std::clamp(nearest(x[16 * j + l] / ds), -32, 31) : 0) + 32);
    }
    for (int h = 0; h < 2; ++h) {
      const uint8_t* qq = q + 128 * h;
      uint8_t* ql = b[i].ql + 64 * h;
      uint8_t* qh = b[i].qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        const int q1 = qq[l], q2 = qq[l + 32], q3 = qq[l + 64], q4 = qq[l + 96];
        ql[l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) |
                                     ((q4 >> 4) << 6));
      }
    }
  }
}

int64_t whole_blocks(DType type, int64_t n) {
  const int64_t be = dtype_info(type).block_elems;
  LOOM_CHECK(n >= 0 && n % be == 0, "{} values are not whole {} blocks", n, dtype_name(type));
  return n / be;
}

}  // namespace

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  const int64_t nb = whole_blocks(type, n);
  switch (type) {
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::F16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::Q8_0:
      return dequant_q8_0(static_cast<const BlockQ8_0*>(src), dst, nb);
    case DType::Q4_0:
      return dequant_q4_0(static_cast<const BlockQ4_0*>(src), dst, nb);
    case DType::Q4_1:
      return dequant_q4_1(static_cast<const BlockQ4_1*>(src), dst, nb);
    case DType::Q5_0:
      return dequant_q5_0(static_cast<const BlockQ5_0*>(src), dst, nb);
    case DType::Q5_1:
      return dequant_q5_1(static_cast<const BlockQ5_1*>(src), dst, nb);
    case DType::Q4_K:
      return dequant_q4_k(static_cast<const BlockQ4_K*>(src), dst, nb);
    case DType::Q5_K:
      return dequant_q5_k(static_cast<const BlockQ5_K*>(src), dst, nb);
    case DType::Q6_K:
      return dequant_q6_k(static_cast<const BlockQ6_K*>(src), dst, nb);
    default:
      LOOM_THROW("cannot convert {} rows to f32", dtype_name(type));
  }
}

void quantize_row(DType type, const float* src, void* dst, int64_t n) {
  const int64_t nb = whole_blocks(type, n);
  switch (type) {
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::F16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::BF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::Q8_0:
      return quant_q8_0(src, static_cast<BlockQ8_0*>(dst), nb);
    case DType::Q4_0:
      return quant_q4_0(src, static_cast<BlockQ4_0*>(dst), nb);
    case DType::Q4_1:
      return quant_affine<BlockQ4_1, 15>(src, static_cast<BlockQ4_1*>(dst), nb);
    case DType::Q5_0:
      return quant_q5_0(src, static_cast<BlockQ5_0*>(dst), nb);
    case DType::Q5_1:
      return quant_affine<BlockQ5_1, 31>(src, static_cast<BlockQ5_1*>(dst), nb);
    case DType::Q4_K:
      return quant_q4_k(src, static_cast<BlockQ4_K*>(dst), nb);
    case DType::Q5_K:
      return quant_q5_k(src, static_cast<BlockQ5_K*>(dst), nb);
    case DType::Q6_K:
      return quant_q6_k(src, static_cast<BlockQ6_K*>(dst), nb);
    default:
      LOOM_THROW("cannot quantise f32 rows to {}", dtype_name(type));
  }
}

}  // namespace loom::quant
