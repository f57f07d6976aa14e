// Portable GEMM kernels (scalar C++): the fallback without AVX2 and the plain
// statement of what the SIMD kernels compute on the same panels (gemm.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_unpack.h"
#include "backend/quant/interleave.h"

namespace loom::cpu {
namespace {

constexpr int kNr = 16;  // one interleaved group per panel

void quantize(const float* x, ActQ8_G* dst, int64_t k) {
  for (int64_t b = 0; b < k / kQK; ++b, x += kQK) {
    float amax = 0;
    for (int l = 0; l < kQK; ++l) amax = std::max(amax, std::fabs(x[l]));
    const float id = amax > 0 ? 127.0f / amax : 0.0f;
    dst[b].d = amax / 127.0f;
    int sums[2] = {0, 0};
    for (int l = 0; l < kQK; ++l)
      sums[l / 16] += dst[b].qs[l] = static_cast<int8_t>(std::nearbyint(x[l] * id));
    dst[b].sum16[0] = static_cast<int16_t>(sums[0]);
    dst[b].sum16[1] = static_cast<int16_t>(sums[1]);
  }
}

bool quant_layout(DType type, QuantLayout& layout) {
  return gemm::layout_of(type, false, layout);
}

template <class U>
void pack_typed(const uint8_t* w, int64_t row_bytes, int rows, int64_t k0, int64_t kc,
                QuantPanel& p) {
  gemm::pack_scales<U>(w, row_bytes, rows, k0, kc, p);
  const int nr = p.nr;
  for (int c = 0; c < nr; ++c) {
    const auto* blocks =
        reinterpret_cast<const typename U::Block*>(w + c * row_bytes) + k0 / U::kUnit;
    for (int64_t k = 0; k < kc; k += 32) {
      uint8_t u[32] = {};
      if (c < rows)
        U::values(blocks[k / U::kUnit], static_cast<int>((k % U::kUnit) / 32), p.layout.is_signed,
                  u);
      for (int l = 0; l < 32; ++l) p.q[((k + l) / 4 * nr + c) * 4 + (l % 4)] = u[l];
    }
  }
}

void pack_quant(DType type, const uint8_t* w, int64_t row_bytes, int rows, int64_t k0, int64_t kc,
                QuantPanel& p) {
  if (quant::is_interleaved(type)) {
    // The panel's rows back to plain rows, then packed as such.
    thread_local std::vector<uint8_t> plain;
    const int64_t unit = dtype_info(type).block_elems, b0 = k0 / unit, nb = kc / unit;
    const int64_t plain_bytes = nb * dtype_info(type).block_bytes;
    plain.resize(static_cast<size_t>(rows * plain_bytes));
    for (int j = 0; j < rows; ++j) {
      const int lane = j % static_cast<int>(quant::kInterleaveRows);
      quant::deinterleave_row(type, w + (j - lane) * row_bytes, lane, b0, b0 + nb,
                              plain.data() + j * plain_bytes);
    }
    w = plain.data();
    row_bytes = plain_bytes;
    k0 = 0;
    type = quant::plain_type(type);
  }
  gemm::with_unpacker(type,
                      [&](auto u) { pack_typed<decltype(u)>(w, row_bytes, rows, k0, kc, p); });
}

void gemm_quant(const QuantPanel& p, const ActQ8_G* x, int64_t xs, int64_t m, float* c, int64_t ldc,
                int cols, bool accumulate) {
  const QuantLayout& l = p.layout;
  const int64_t nsub = p.kc / l.sub;
  for (int64_t r = 0; r < m; ++r) {
    const ActQ8_G* xr = x + r * xs;
    for (int j = 0; j < cols; ++j) {
      float acc = 0;
      for (int64_t s = 0; s < nsub; ++s) {
        const int64_t k0 = s * l.sub;
        const ActQ8_G& a = xr[k0 / 32];
        const int sum = l.sub == 16 ? a.sum16[(k0 / 16) & 1] : a.sum16[0] + a.sum16[1];
        int isum = -l.offset * sum;
        for (int64_t k = k0; k < k0 + l.sub; ++k) {
          const uint8_t u = p.q[(k / 4 * p.nr + j) * 4 + k % 4];
          const int wv = l.is_signed ? static_cast<int8_t>(u) : u;
          isum += wv * a.qs[k % 32];
        }
        acc += p.scale[s * p.nr + j] * a.d * static_cast<float>(isum);
        if (l.has_bias) acc += p.bias[s * p.nr + j] * a.d * static_cast<float>(sum);
      }
      float& out = c[r * ldc + j];
      out = accumulate ? out + acc : acc;
    }
  }
}

void pack_float(DType type, const uint8_t* w, int64_t row_bytes, int rows, int64_t k0, int64_t kc,
                float* panel) {
  for (int c = 0; c < kNr; ++c)
    for (int64_t k = 0; k < kc; ++k) {
      float v = 0;
      if (c < rows) {
        const uint8_t* row = w + c * row_bytes;
        if (type == DType::F32)
          v = reinterpret_cast<const float*>(row)[k0 + k];
        else if (type == DType::F16)
          v = f16_to_f32(reinterpret_cast<const uint16_t*>(row)[k0 + k]);
        else
          v = bf16_to_f32(reinterpret_cast<const uint16_t*>(row)[k0 + k]);
      }
      panel[k * kNr + c] = v;
    }
}

void gemm_float(const float* panel, int64_t kc, const float* x, int64_t ldx, int64_t m, float* c,
                int64_t ldc, int cols, bool accumulate) {
  for (int64_t r = 0; r < m; ++r)
    for (int j = 0; j < cols; ++j) {
      float acc = 0;
      for (int64_t k = 0; k < kc; ++k) acc += panel[k * kNr + j] * x[r * ldx + k];
      float& out = c[r * ldc + j];
      out = accumulate ? out + acc : acc;
    }
}

}  // namespace

const GemmKernels& gemm_kernels_portable() {
  // No row path: the scalar GEMM serves every M.
  static const GemmKernels k{Isa::Portable, kNr,        quant_layout, quantize, pack_quant,
                             gemm_quant,    pack_float, gemm_float,   nullptr,  nullptr};
  return k;
}

const GemmKernels& gemm_kernels_for(Isa isa) {
  switch (isa) {
    case Isa::Avx512Vnni:
      return gemm_kernels_avx512vnni();
    case Isa::Avx512:
      return gemm_kernels_avx512();
    case Isa::Avx2:
      return gemm_kernels_avx2();
    case Isa::Portable:
      break;
  }
  return gemm_kernels_portable();
}

}  // namespace loom::cpu
