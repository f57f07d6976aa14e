// The x86 row path (gemm.h: rows_quant / rows_float) for M < kGemmMinRowsQuant
// activation rows (decode): eight weight rows at a time (an interleaved
// weight: its group of sixteen, rows_interleaved), read as stored, with
// no panel. Each output takes exactly the operations the GEMM micro-kernels of
// gemm_x86.h give it, in the same order, so a row's result does not depend on
// how many rows it is multiplied with:
//  * quantised weights: per sub-block (K order) the exact integer dot of the
//    weight's u bytes with the 8-bit activation block, less offset * sum, then
//    acc = fma(float(isum), s * dx, acc) and, for types with a min,
//    acc = fma(b, dx * sum, acc);
//  * float weights: acc = fma(w_k, x_k, acc) along K;
//  * both restart acc at every K chunk of the GEMM (kGemmKcQuant /
//    kGemmKcFloat) and add it to the previous chunks' sum.
// The GEMM keeps one output column per vector lane; so does this path, with the
// eight weight rows as the eight lanes of 256-bit vectors: the integer dots of
// each row are summed across their lanes (hadd tree) and float weights are
// transposed 8 x 8 in registers. Lanes never mix, so 256- and 512-bit vectors
// give the same bits. Included by gemm_avx2.cpp and gemm_avx512.h.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <type_traits>

#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_unpack.h"
#include "backend/cpu/gemm_x86.h"
#include "backend/cpu/simd_x86.h"

namespace loom::cpu::gemm {
namespace {

constexpr int kRowLanes = 8;

// Lane i of lo / hi: the sum of lanes 0..3 / 4..7 of p[i] (bytes 0..15 / 16..31
// of the 32 the dots covered).
inline void sum_lanes8(const __m256i* p, __m256i& lo, __m256i& hi) {
  const __m256i a = _mm256_hadd_epi32(p[0], p[1]), b = _mm256_hadd_epi32(p[2], p[3]);
  const __m256i c = _mm256_hadd_epi32(p[4], p[5]), d = _mm256_hadd_epi32(p[6], p[7]);
  const __m256i ab = _mm256_hadd_epi32(a, b), cd = _mm256_hadd_epi32(c, d);
  lo = _mm256_permute2x128_si256(ab, cd, 0x20);
  hi = _mm256_permute2x128_si256(ab, cd, 0x31);
}

// The f16 field `get(block)` of the 8 rows' blocks as f32 lanes (the same
// values f16_to_f32 gives).
template <class Block, class Get>
inline __m256 f16_lanes(const Block* const* blocks, int64_t b, Get get) {
  __m128i h = _mm_setzero_si128();
  h = _mm_insert_epi16(h, get(blocks[0][b]), 0);
  h = _mm_insert_epi16(h, get(blocks[1][b]), 1);
  h = _mm_insert_epi16(h, get(blocks[2][b]), 2);
  h = _mm_insert_epi16(h, get(blocks[3][b]), 3);
  h = _mm_insert_epi16(h, get(blocks[4][b]), 4);
  h = _mm_insert_epi16(h, get(blocks[5][b]), 5);
  h = _mm_insert_epi16(h, get(blocks[6][b]), 6);
  h = _mm_insert_epi16(h, get(blocks[7][b]), 7);
  return _mm256_cvtph_ps(h);
}

// Per sub-block of block b, the 8 rows' scales s and biases b as lanes: the
// values U::scales gives (pack_scales puts them in the GEMM's panels), made
// with the same f32 operations.
template <class U>
struct RowScales {  // 32-value types: s = d (and b = m)
  static void get(const typename U::Block* const* blocks, int64_t b, __m256* s, __m256* bias) {
    s[0] = f16_lanes(blocks, b, [](const auto& blk) { return blk.d; });
    if constexpr (U::kBias) bias[0] = f16_lanes(blocks, b, [](const auto& blk) { return blk.m; });
  }
};
template <class B, bool kFive>
struct RowScales<UnpackK45<B, kFive>> {  // s_j = d * sc_j, b_j = -dmin * m_j
  static void get(const B* const* blocks, int64_t b, __m256* s, __m256* bias) {
    const __m256 d = f16_lanes(blocks, b, [](const B& blk) { return blk.d; });
    const __m256 dmin = f16_lanes(blocks, b, [](const B& blk) { return blk.dmin; });
    __m256i sc[8], m[8];
    for (int i = 0; i < 8; ++i) {
      const __m128i v = simd::unpack_k_scales(blocks[i][b].scales);
      sc[i] = _mm256_cvtepu8_epi32(v);
      m[i] = _mm256_cvtepu8_epi32(_mm_srli_si128(v, 8));
    }
    simd::transpose8x8(sc);
    simd::transpose8x8(m);
    const __m256 neg_dmin = _mm256_xor_ps(dmin, _mm256_set1_ps(-0.0f));  // exact -dmin
    for (int j = 0; j < 8; ++j) {
      s[j] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc[j]));
      bias[j] = _mm256_mul_ps(neg_dmin, _mm256_cvtepi32_ps(m[j]));
    }
  }
};
template <>
struct RowScales<UnpackQ6_K> {  // s_j = d * sc_j (16 int8 scales)
  static void get(const BlockQ6_K* const* blocks, int64_t b, __m256* s, __m256*) {
    const __m256 d = f16_lanes(blocks, b, [](const BlockQ6_K& blk) { return blk.d; });
    __m256i lo[8], hi[8];
    for (int i = 0; i < 8; ++i) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[i][b].scales));
      lo[i] = _mm256_cvtepi8_epi32(v);
      hi[i] = _mm256_cvtepi8_epi32(_mm_srli_si128(v, 8));
    }
    simd::transpose8x8(lo);
    simd::transpose8x8(hi);
    for (int j = 0; j < 8; ++j) {
      s[j] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(lo[j]));
      s[j + 8] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(hi[j]));
    }
  }
};

// One 32-value chunk j of a row's chain (the GEMM's f32 steps, in its order):
// lo / hi are the exact integer dots of its values 0..15 / 16..31 with the
// activation block a, one weight row per lane (L: Lanes8 or Lanes16).
template <class L, int kSub, bool kBias, int kOffset>
inline typename L::F add_chunk(typename L::I lo, typename L::I hi, const ActQ8_G& a,
                               const typename L::F* scale, const typename L::F* bias, int j,
                               typename L::F acc) {
  const auto dx = L::set1f(a.d);
  if constexpr (kSub == 16) {
    lo = L::add32(lo, L::set1(-kOffset * a.sum16[0]));
    hi = L::add32(hi, L::set1(-kOffset * a.sum16[1]));
    acc = L::fmadd(L::cvt(lo), L::mul(scale[2 * j], dx), acc);
    return L::fmadd(L::cvt(hi), L::mul(scale[2 * j + 1], dx), acc);
  } else {
    const int sum = a.sum16[0] + a.sum16[1];
    const auto isum = L::add32(L::add32(lo, hi), L::set1(-kOffset * sum));
    acc = L::fmadd(L::cvt(isum), L::mul(scale[j], dx), acc);
    if constexpr (kBias) acc = L::fmadd(bias[j], L::set1f(a.d * static_cast<float>(sum)), acc);
    return acc;
  }
}

// fn(std::integral_constant<int, NX>{}) for m activation rows (1..4; more: 4).
template <class Fn>
void with_row_count(int m, Fn&& fn) {
  switch (m) {
    case 1:
      return fn(std::integral_constant<int, 1>{});
    case 2:
      return fn(std::integral_constant<int, 2>{});
    case 3:
      return fn(std::integral_constant<int, 3>{});
    default:
      return fn(std::integral_constant<int, 4>{});
  }
}

template <class U, int NX, bool kVnni, bool kSigned>
void rows_quant_typed(const uint8_t* w, int64_t row_bytes, int rows, int64_t k, const ActQ8_G* x,
                      int64_t xs, float* c, int64_t ldc, const uint8_t* next) {
  using Block = typename U::Block;
  using L = Lanes8;
  constexpr int kSubs = U::kUnit / U::kSub;
  constexpr int kOffset = kSigned ? 0 : U::kOffset;
  // Lanes past the weight's rows repeat its last row and are never stored.
  const Block* blocks[kRowLanes];
  for (int i = 0; i < kRowLanes; ++i)
    blocks[i] = reinterpret_cast<const Block*>(w + std::min(i, rows - 1) * row_bytes);
  __m256 scale[kSubs], bias[kSubs];
  __m256 tot[NX];
  for (int r = 0; r < NX; ++r) tot[r] = _mm256_setzero_ps();
  for (int64_t k0 = 0; k0 < k; k0 += kGemmKcQuant) {
    __m256 acc[NX];
    for (int r = 0; r < NX; ++r) acc[r] = _mm256_setzero_ps();
    const int64_t k1 = std::min(k, k0 + kGemmKcQuant);
    for (int64_t kk = k0; kk < k1; kk += 32) {
      const int64_t b = kk / U::kUnit;
      const int j = static_cast<int>((kk % U::kUnit) / 32);
      if (j == 0) {
        RowScales<U>::get(blocks, b, scale, bias);
        // The next group's block b, one group ahead: the weights come from DRAM
        // once, and the hardware prefetcher alone does not keep eight streams
        // ahead.
        if (next)
          for (int i = 0; i < kRowLanes; ++i) {
            const uint8_t* p = next + i * row_bytes + b * static_cast<int64_t>(sizeof(Block));
            for (size_t o = 0; o < sizeof(Block); o += 64) __builtin_prefetch(p + o);
            __builtin_prefetch(p + sizeof(Block) - 1);
          }
      }
      __m256i v[kRowLanes];
      for (int i = 0; i < kRowLanes; ++i) v[i] = SimdValues<U>::get(blocks[i][b], j, kSigned);
      for (int r = 0; r < NX; ++r) {
        const ActQ8_G& a = x[r * xs + kk / 32];
        const __m256i xq = simd::load256(a.qs);
        __m256i p[kRowLanes];
        for (int i = 0; i < kRowLanes; ++i)
          p[i] = kSigned ? L::dot_signed<kVnni>(L::zero(), v[i], xq)
                         : L::dot<kVnni>(L::zero(), v[i], xq);
        __m256i lo, hi;
        sum_lanes8(p, lo, hi);
        acc[r] = add_chunk<L, U::kSub, U::kBias, kOffset>(lo, hi, a, scale, bias, j, acc[r]);
      }
    }
    for (int r = 0; r < NX; ++r) tot[r] = k0 == 0 ? acc[r] : _mm256_add_ps(acc[r], tot[r]);
  }
  for (int r = 0; r < NX; ++r) L::store(c + r * ldc, tot[r], rows, false);
}

// The row path on an interleaved group (quant/interleave.h): 64 bytes of the
// group hold 4 values of each of its 16 rows, lane by lane, so each dot of them
// with 4 activation bytes broadcast to every lane adds to the rows' sums at
// once: no transposing rows, no sum across lanes. ls holds one lane policy
// per part of the group: {Lanes16} (all 16 rows), or {Lanes8 half 0, Lanes8
// half 1} (rows 0..7, then 8..15; H = 1 where the group has at most 8 rows).
// The group is read once, block after block, every part of a block before the
// next block, so its bytes stream from memory once while every part is worked
// on. The integer sums and the f32 steps are those of rows_quant_typed (and
// of the GEMM), in the same order for every row: the same bits.
template <class T, class L, int H, int NX, bool kVnni, bool kSigned>
void rows_interleaved(const L (&ls)[H], const uint8_t* w, int rows, int64_t k, const ActQ8_G* x,
                      int64_t xs, float* c, int64_t ldc, const uint8_t* next) {
  using Group = typename T::Group;
  using I = typename L::I;
  using F = typename L::F;
  constexpr int kSubs = T::kUnit / T::kSub;
  constexpr int kChunks = T::kUnit / 32;
  constexpr int kOffset = kSigned ? 0 : T::kOffset;
  constexpr size_t kPrefetchLines = (sizeof(Group) + 63) / 64;  // a block's lines
  static_assert(kGemmKcQuant % T::kUnit == 0);
  const auto* groups = reinterpret_cast<const Group*>(w);
  const RowPrefetch& pf = row_prefetch();
  F scale[kSubs], bias[kSubs];
  F tot[H][NX];
  for (int h = 0; h < H; ++h)
    for (int r = 0; r < NX; ++r) tot[h][r] = L::zerof();
  for (int64_t k0 = 0; k0 < k; k0 += kGemmKcQuant) {
    F acc[H][NX];
    for (int h = 0; h < H; ++h)
      for (int r = 0; r < NX; ++r) acc[h][r] = L::zerof();
    const int64_t b1 = std::min(k, k0 + kGemmKcQuant) / T::kUnit;
    for (int64_t b = k0 / T::kUnit; b < b1; ++b) {
      for (int h = 0; h < H; ++h) {
        const L& l = ls[h];
        T::scales(l, groups[b], scale, bias);
        for (int j = 0; j < kChunks; ++j) {
          // A group's blocks, and the next group's after them, are one
          // stream of bytes: fetch a block's worth row_prefetch() ahead
          // (gemm.h), a chunk's share at each chunk: a K-quant block's 36-53
          // lines requested in one burst streamed slower (single-stream
          // decode -5% on an Intel Xeon).
          if (next && h == 0) {
            const char* p = reinterpret_cast<const char*>(groups + b) + pf.bytes;
            const size_t end = kPrefetchLines * (j + 1) / kChunks;
            for (size_t line = kPrefetchLines * j / kChunks; line < end; ++line) {
              if (pf.l2)
                __builtin_prefetch(p + 64 * line, 0, 2);
              else
                __builtin_prefetch(p + 64 * line);
            }
          }
          I v[8];
          T::template values<kSigned>(l, groups[b], j, v);
          for (int r = 0; r < NX; ++r) {
            const ActQ8_G& a = x[r * xs + b * kChunks + j];
            int32_t xq[8];
            __builtin_memcpy(xq, a.qs, sizeof(xq));
            // i0: values 0..15 of the chunk (v[0..3]), i1: values 16..31.
            I i0 = L::zero(), i1 = L::zero();
            for (int q = 0; q < 4; ++q) {
              const I x0 = L::set1(xq[q]), x1 = L::set1(xq[q + 4]);
              if constexpr (kSigned) {
                i0 = L::template dot_signed<kVnni>(i0, v[q], x0);
                i1 = L::template dot_signed<kVnni>(i1, v[q + 4], x1);
              } else {
                i0 = L::template dot<kVnni>(i0, v[q], x0);
                i1 = L::template dot<kVnni>(i1, v[q + 4], x1);
              }
            }
            acc[h][r] = add_chunk<L, T::kSub, T::kBias, kOffset>(i0, i1, a, scale, bias, j, acc[h][r]);
          }
        }
      }
    }
    for (int h = 0; h < H; ++h)
      for (int r = 0; r < NX; ++r) tot[h][r] = k0 == 0 ? acc[h][r] : L::add(acc[h][r], tot[h][r]);
  }
  for (int h = 0; h < H; ++h) {
    const int n = std::min(rows - h * L::kLanes, L::kLanes);
    for (int r = 0; r < NX; ++r) L::store(c + r * ldc + h * L::kLanes, tot[h][r], n, false);
  }
}

template <bool kVnni, bool kQ8Signed>
void x86_rows_quant(DType type, const uint8_t* w, int64_t row_bytes, int rows, int64_t k,
                    const ActQ8_G* x, int64_t xs, int m, float* c, int64_t ldc,
                    const uint8_t* next) {
  if (with_interleaved(type, [&](auto t) {
        using T = decltype(t);
        constexpr bool kSigned = kQ8Signed && std::is_same_v<T, Interleaved<DType::Q8_0_R16>>;
        with_row_count(m, [&](auto nx) {
          constexpr int NX = decltype(nx)::value;
#if defined(__AVX512BW__) && defined(__AVX512VL__)
          const Lanes16 all[1] = {Lanes16{}};
          rows_interleaved<T, Lanes16, 1, NX, kVnni, kSigned>(all, w, rows, k, x, xs, c, ldc, next);
#else
          // Both halves of each block in turn (rows 8..15 only where there are any).
          Lanes8 halves[2];
          halves[1].half = 1;
          const Lanes8 first[1] = {halves[0]};
          if (rows > 8)
            rows_interleaved<T, Lanes8, 2, NX, kVnni, kSigned>(halves, w, rows, k, x, xs, c, ldc, next);
          else
            rows_interleaved<T, Lanes8, 1, NX, kVnni, kSigned>(first, w, rows, k, x, xs, c, ldc, next);
#endif
        });
      }))
    return;
  with_unpacker(type, [&](auto u) {
    using U = decltype(u);
    constexpr bool kSigned = kQ8Signed && std::is_same_v<U, UnpackQ8_0>;
    with_row_count(m, [&](auto nx) {
      rows_quant_typed<U, decltype(nx)::value, kVnni, kSigned>(w, row_bytes, rows, k, x, xs, c, ldc,
                                                               next);
    });
  });
}

template <int NX>
void rows_float_typed(DType type, const uint8_t* w, int64_t row_bytes, int rows, int64_t k,
                      const float* x, int64_t ldx, float* c, int64_t ldc) {
  const uint8_t* row[kRowLanes];
  for (int i = 0; i < kRowLanes; ++i) row[i] = w + std::min(i, rows - 1) * row_bytes;
  __m256 tot[NX];
  for (int r = 0; r < NX; ++r) tot[r] = _mm256_setzero_ps();
  for (int64_t k0 = 0; k0 < k; k0 += kGemmKcFloat) {
    __m256 acc[NX];
    for (int r = 0; r < NX; ++r) acc[r] = _mm256_setzero_ps();
    const int64_t k1 = std::min(k, k0 + kGemmKcFloat), k8 = k0 + (k1 - k0) / 8 * 8;
    for (int64_t kk = k0; kk < k8; kk += 8) {
      __m256i v[kRowLanes];
      for (int i = 0; i < kRowLanes; ++i)
        v[i] = _mm256_castps_si256(load8_as_f32(type, row[i], kk));
      simd::transpose8x8(v);
      for (int g = 0; g < 8; ++g)
        for (int r = 0; r < NX; ++r)
          acc[r] = _mm256_fmadd_ps(_mm256_castsi256_ps(v[g]), _mm256_set1_ps(x[r * ldx + kk + g]),
                                   acc[r]);
    }
    for (int64_t kk = k8; kk < k1; ++kk) {
      alignas(32) float t[kRowLanes];
      for (int i = 0; i < kRowLanes; ++i) t[i] = load1_as_f32(type, row[i], kk);
      const __m256 wv = _mm256_load_ps(t);
      for (int r = 0; r < NX; ++r)
        acc[r] = _mm256_fmadd_ps(wv, _mm256_set1_ps(x[r * ldx + kk]), acc[r]);
    }
    for (int r = 0; r < NX; ++r) tot[r] = k0 == 0 ? acc[r] : _mm256_add_ps(acc[r], tot[r]);
  }
  for (int r = 0; r < NX; ++r) simd::V256::store(c + r * ldc, tot[r], rows, false);
}

void x86_rows_float(DType type, const uint8_t* w, int64_t row_bytes, int rows, int64_t k,
                    const float* x, int64_t ldx, int m, float* c, int64_t ldc) {
  switch (m) {
    case 1:
      return rows_float_typed<1>(type, w, row_bytes, rows, k, x, ldx, c, ldc);
    case 2:
      return rows_float_typed<2>(type, w, row_bytes, rows, k, x, ldx, c, ldc);
    default:
      return rows_float_typed<3>(type, w, row_bytes, rows, k, x, ldx, c, ldc);
  }
}

}  // namespace
}  // namespace loom::cpu::gemm
