// x86 GEMM kernels on the panels of gemm.h, written once over a vector policy
// V (256-bit AVX2 or 512-bit AVX-512, with or without VNNI) and included by
// gemm_avx2.cpp / gemm_avx512.cpp under their own ISA flags. A panel is two
// vectors wide (nr = 2 * V::kLanes columns); the micro-kernel holds MR rows x
// nr columns of int32 sums for one sub-block and of f32 results for the whole
// panel in registers, so each panel vector load feeds MR dot products.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_unpack.h"
#include "backend/cpu/simd_x86.h"
#include "backend/cpu/simd_vec_x86.h"

namespace loom::cpu::gemm {
namespace {

using simd::load256;

// ---- activations -------------------------------------------------------

void x86_quantize(const float* x, ActQ8_G* dst, int64_t k) {
  for (int64_t b = 0; b < k / kQK; ++b, x += kQK) {
    const float amax = simd::max_abs(x, kQK);
    dst[b].d = amax / 127.0f;
    const __m256i q = simd::round_pack32(x, _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst[b].qs), q);
    // int16 pair sums, then the 8 of each 16-byte half.
    const __m256i s32 =
        _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
    __m128i lo = _mm256_castsi256_si128(s32), hi = _mm256_extracti128_si256(s32, 1);
    lo = _mm_add_epi32(lo, _mm_unpackhi_epi64(lo, lo));
    hi = _mm_add_epi32(hi, _mm_unpackhi_epi64(hi, hi));
    dst[b].sum16[0] =
        static_cast<int16_t>(_mm_cvtsi128_si32(_mm_add_epi32(lo, _mm_shuffle_epi32(lo, 1))));
    dst[b].sum16[1] =
        static_cast<int16_t>(_mm_cvtsi128_si32(_mm_add_epi32(hi, _mm_shuffle_epi32(hi, 1))));
  }
}

// ---- weight unpacking: 32 values of one block as bytes, in order -----------

template <class U>
struct SimdValues;

template <>
struct SimdValues<UnpackQ8_0> {
  static __m256i get(const BlockQ8_0& b, int, bool is_signed) {
    const __m256i q = load256(b.qs);
    return is_signed ? q : _mm256_xor_si256(q, _mm256_set1_epi8(-128));
  }
};
template <class B, int kOff, bool kMin, bool kFive>
struct SimdValues<Unpack32<B, kOff, kMin, kFive>> {
  static __m256i get(const B& b, int, bool) {
    if constexpr (kFive)
      return _mm256_or_si256(simd::unpack_nibbles(b.qs), simd::unpack_fifth_bits(b.qh));
    return simd::unpack_nibbles(b.qs);
  }
};
template <class B, bool kFive>
struct SimdValues<UnpackK45<B, kFive>> {
  static __m256i get(const B& b, int j, bool) {
    const __m256i q = load256(b.qs + 32 * (j / 2));
    __m256i v = _mm256_and_si256((j & 1) ? _mm256_srli_epi16(q, 4) : q, _mm256_set1_epi8(0x0F));
    if constexpr (kFive) {
      const __m256i bit =
          _mm256_and_si256(_mm256_srli_epi16(load256(b.qh), j), _mm256_set1_epi8(1));
      v = _mm256_or_si256(v, _mm256_slli_epi16(bit, 4));
    }
    return v;
  }
};
template <>
struct SimdValues<UnpackQ6_K> {
  static __m256i get(const BlockQ6_K& b, int j, bool) {
    const int h = j / 4, t = j % 4;
    const __m256i ql = load256(b.ql + 64 * h + 32 * (t & 1));
    const __m256i lo =
        _mm256_and_si256((t >> 1) ? _mm256_srli_epi16(ql, 4) : ql, _mm256_set1_epi8(0x0F));
    const __m256i qh = _mm256_srli_epi16(load256(b.qh + 32 * h), 2 * t);
    return _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(3)), 4));
  }
};

// ---- interleaved weights (quant/interleave.h) ---------------------------
// The traits below read a group of 16 rows through a lane policy: Lanes16
// (512-bit vectors, the 16 rows as lanes) or Lanes8 (256-bit vectors, rows
// 8 * half .. 8 * half + 7 as lanes: the half of each 16-lane field). Lanes
// never mix, so a row gets the same operations either way. The f32 and int32
// lane arithmetic is the vector policy's (simd_vec_x86.h).
struct Lanes8 : simd::V256 {
  int half = 0;
  // This half of a field of the 16 lanes (a chunk, a lane array).
  template <class A>
  const char* part(const A& a) const {
    return reinterpret_cast<const char*>(&a) + half * (sizeof(A) / 2);
  }
  template <class A>
  I load(const A& chunk) const {
    static_assert(sizeof(A) == 64);
    return load256(part(chunk));
  }
  // 0x10 in byte i where bit i of the lanes' part of qh is set, else 0.
  I fifth_bits(const uint64_t& qh) const {
    return simd::unpack_fifth_bits(reinterpret_cast<const uint8_t*>(part(qh)));
  }
  // Lane i: the f16 p[i] as f32; the byte p[i] as int32 (unsigned / signed).
  F halves(const uint16_t (&p)[16]) const {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(part(p))));
  }
  I u8(const uint8_t (&p)[16]) const {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(part(p))));
  }
  I i8(const int8_t (&p)[16]) const {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(part(p))));
  }
  static I bytes(int8_t v) { return _mm256_set1_epi8(v); }
  static I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static I or_(I a, I b) { return _mm256_or_si256(a, b); }
  static I xor_(I a, I b) { return _mm256_xor_si256(a, b); }
  static I add32(I a, I b) { return _mm256_add_epi32(a, b); }
  static I srli16(I v, int n) { return _mm256_srli_epi16(v, n); }
  static I slli16(I v, int n) { return _mm256_slli_epi16(v, n); }
  static I srli32(I v, int n) { return _mm256_srli_epi32(v, n); }
  static I slli32(I v, int n) { return _mm256_slli_epi32(v, n); }
  // lo | (hi & mask) per byte (one vpternlogd where AVX-512 VL is on).
  static I or_masked(I lo, I hi, I mask) {
#if defined(__AVX512VL__)
    return _mm256_ternarylogic_epi32(lo, hi, mask, 0xF8);
#else
    return _mm256_or_si256(lo, _mm256_and_si256(hi, mask));
#endif
  }
  // acc + the int32 sums of 4 products of unsigned bytes u and signed bytes s
  // (exact: u <= 63 keeps maddubs' int16 pairs in range without VNNI).
  template <bool kVnni>
  static I dot(I acc, I u, I s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    if constexpr (kVnni) return _mm256_dpbusd_epi32(acc, u, s);
#else
    static_assert(!kVnni, "VNNI dots need a file built with -mavx512vnni");
#endif
    return V256::dot(acc, u, s);
  }
  // The same for signed bytes on both sides: |w| against x with w's sign.
  template <bool kVnni>
  static I dot_signed(I acc, I w, I x) {
    return dot<kVnni>(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  }
  static F neg(F v) { return _mm256_xor_ps(v, _mm256_set1_ps(-0.0f)); }  // exact
};

#if defined(__AVX512BW__) && defined(__AVX512VL__)
struct Lanes16 : simd::V512Bw {
  template <class A>
  static I load(const A& chunk) {
    static_assert(sizeof(A) == 64);
    return _mm512_loadu_si512(&chunk);
  }
  static I fifth_bits(const uint64_t& qh) { return _mm512_maskz_set1_epi8(qh, 0x10); }
  static F halves(const uint16_t (&p)[16]) { return _mm512_cvtph_ps(load256(p)); }
  static I u8(const uint8_t (&p)[16]) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static I i8(const int8_t (&p)[16]) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static I bytes(int8_t v) { return _mm512_set1_epi8(v); }
  static I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static I or_(I a, I b) { return _mm512_or_si512(a, b); }
  static I xor_(I a, I b) { return _mm512_xor_si512(a, b); }
  static I add32(I a, I b) { return _mm512_add_epi32(a, b); }
  static I srli16(I v, int n) { return _mm512_srli_epi16(v, static_cast<unsigned>(n)); }
  static I slli16(I v, int n) { return _mm512_slli_epi16(v, static_cast<unsigned>(n)); }
  static I srli32(I v, int n) { return _mm512_srli_epi32(v, static_cast<unsigned>(n)); }
  static I slli32(I v, int n) { return _mm512_slli_epi32(v, static_cast<unsigned>(n)); }
  static I or_masked(I lo, I hi, I mask) { return _mm512_ternarylogic_epi32(lo, hi, mask, 0xF8); }
  template <bool kVnni>
  static I dot(I acc, I u, I s) {
    return simd::V512<kVnni>::dot(acc, u, s);
  }
  template <bool kVnni>
  static I dot_signed(I acc, I w, I x) {
    return simd::V512<kVnni>::dot_signed(acc, w, x);
  }
  static F neg(F v) {
    return _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN)));
  }
};
#endif

// v shifted so that its bit `from` of every byte lands on bit `to` (other
// bits are not cleared: callers mask them).
template <class L>
inline typename L::I move_bits(typename L::I v, int from, int to) {
  return from <= to ? L::slli16(v, to - from) : L::srli16(v, from - to);
}

// Per interleaved type: its group, the GEMM layout's numbers (kUnit values
// per block, kSub per scale, kOffset, kBias), the values of chunk j of a
// block (values 32j .. 32j + 31) as u bytes, v[k] holding values 4k .. 4k + 3
// of each row lane by lane (the panel's layout already), and the block's
// scales and biases with the rows as lanes: the values U::values / U::scales
// give (gemm_unpack.h), made with the same f32 operations. l (Lanes8 or
// Lanes16) picks the group's lanes.
template <DType T>
struct Interleaved;

template <>
struct Interleaved<DType::Q8_0_R16> {
  using Group = BlockQ8_0x16;
  static constexpr int kUnit = 32, kSub = 32, kOffset = 128;
  static constexpr bool kBias = false;
  template <bool kSigned, class L>
  static void values(const L& l, const Group& g, int, typename L::I* v) {
    for (int k = 0; k < 8; ++k) {
      v[k] = l.load(g.qs[k]);
      if constexpr (!kSigned) v[k] = L::xor_(v[k], L::bytes(-128));  // q + 128
    }
  }
  template <class L>
  static void scales(const L& l, const Group& g, typename L::F* s, typename L::F*) {
    s[0] = l.halves(g.d);
  }
};

template <>
struct Interleaved<DType::Q5_0_R16> {
  using Group = BlockQ5_0x16;
  static constexpr int kUnit = 32, kSub = 32, kOffset = 16;
  static constexpr bool kBias = false;
  template <bool, class L>
  static void values(const L& l, const Group& g, int, typename L::I* v) {
    const auto low4 = L::bytes(0x0F);
    for (int k = 0; k < 4; ++k) {
      const auto q = l.load(g.qs[k]);
      v[k] = L::or_(L::and_(q, low4), l.fifth_bits(g.qh[k]));
      v[k + 4] = L::or_(L::and_(L::srli16(q, 4), low4), l.fifth_bits(g.qh[k + 4]));
    }
  }
  template <class L>
  static void scales(const L& l, const Group& g, typename L::F* s, typename L::F*) {
    s[0] = l.halves(g.d);
  }
};

// Q4_K / Q5_K: s_j = d * sc_j, b_j = -dmin * m_j.
template <class G, bool kFive>
struct InterleavedK45 {
  using Group = G;
  static constexpr int kUnit = kQKK, kSub = 32, kOffset = 0;
  static constexpr bool kBias = true;
  template <bool, class L>
  static void values(const L& l, const Group& g, int j, typename L::I* v) {
    const auto low4 = L::bytes(0x0F);
    for (int k = 0; k < 8; ++k) {
      const auto q = l.load(g.qs[8 * (j / 2) + k]);
      v[k] = L::and_((j & 1) ? L::srli16(q, 4) : q, low4);
      if constexpr (kFive)  // bit j of qh is bit 4 of u
        v[k] = L::or_masked(v[k], move_bits<L>(l.load(g.qh[k]), j, 4), L::bytes(0x10));
    }
  }
  template <class L>
  static void scales(const L& l, const Group& g, typename L::F* s, typename L::F* bias) {
    using I = typename L::I;
    const auto d = l.halves(g.d);
    const auto neg_dmin = L::neg(l.halves(g.dmin));
    // Byte b of the rows' packed scales as int32 lanes; then k_scale_min
    // (gguf_blocks.h) on all lanes at once.
    I sb[12];
    for (int b = 0; b < 12; ++b) sb[b] = l.u8(g.scales[b]);
    const I m6 = L::set1(63), m4 = L::set1(15);
    for (int j = 0; j < 8; ++j) {
      I sc, m;
      if (j < 4) {
        sc = L::and_(sb[j], m6);
        m = L::and_(sb[j + 4], m6);
      } else {
        sc = L::or_(L::and_(sb[j + 4], m4), L::slli32(L::srli32(sb[j - 4], 6), 4));
        m = L::or_(L::srli32(sb[j + 4], 4), L::slli32(L::srli32(sb[j], 6), 4));
      }
      s[j] = L::mul(d, L::cvt(sc));
      bias[j] = L::mul(neg_dmin, L::cvt(m));
    }
  }
};
template <>
struct Interleaved<DType::Q4_K_R16> : InterleavedK45<BlockQ4_Kx16, false> {};
template <>
struct Interleaved<DType::Q5_K_R16> : InterleavedK45<BlockQ5_Kx16, true> {};

// Q6_K: 16 sub-blocks of 16, s_j = d * sc_j, u in [0, 63], offset 32.
template <>
struct Interleaved<DType::Q6_K_R16> {
  using Group = BlockQ6_Kx16;
  static constexpr int kUnit = kQKK, kSub = 16, kOffset = 32;
  static constexpr bool kBias = false;
  // Chunk j: half h = j / 4 of the block, quarter t = j % 4 (UnpackQ6_K::values).
  template <bool, class L>
  static void values(const L& l, const Group& g, int j, typename L::I* v) {
    const int h = j / 4, t = j % 4;
    for (int k = 0; k < 8; ++k) {
      const auto ql = l.load(g.ql[16 * h + 8 * (t & 1) + k]);
      const auto lo = L::and_((t >> 1) ? L::srli16(ql, 4) : ql, L::bytes(0x0F));
      // Bits 2t, 2t + 1 of qh are bits 4, 5 of u.
      v[k] = L::or_masked(lo, move_bits<L>(l.load(g.qh[8 * h + k]), 2 * t, 4), L::bytes(0x30));
    }
  }
  template <class L>
  static void scales(const L& l, const Group& g, typename L::F* s, typename L::F*) {
    const auto d = l.halves(g.d);
    for (int j = 0; j < 16; ++j) s[j] = L::mul(d, L::cvt(l.i8(g.scales[j])));
  }
};

// fn(Interleaved<type>{}) for an interleaved type (true); false for any other.
template <class Fn>
bool with_interleaved(DType type, Fn&& fn) {
  switch (type) {
    case DType::Q8_0_R16:
      return fn(Interleaved<DType::Q8_0_R16>{}), true;
    case DType::Q5_0_R16:
      return fn(Interleaved<DType::Q5_0_R16>{}), true;
    case DType::Q4_K_R16:
      return fn(Interleaved<DType::Q4_K_R16>{}), true;
    case DType::Q5_K_R16:
      return fn(Interleaved<DType::Q5_K_R16>{}), true;
    case DType::Q6_K_R16:
      return fn(Interleaved<DType::Q6_K_R16>{}), true;
    default:
      return false;
  }
}

// pack_quant of an interleaved weight: each 32-value chunk of a group's block
// is 8 of the panel's rows of 32 bytes per half group, as they are (values
// unpacked); columns past rows are zero. nr is a multiple of the group.
template <class T>
void x86_pack_interleaved(const uint8_t* w, int64_t row_bytes, int rows, int64_t k0, int64_t kc,
                          QuantPanel& p) {
  using Group = typename T::Group;
  constexpr int kSubs = T::kUnit / T::kSub;
  const int nr = p.nr;
  for (int c0 = 0; c0 < nr; c0 += 8) {
    // Half c0 / 8 % 2 of the group at c0 / 16. A row slice may end inside a
    // group (its lanes past rows are zeroed), or before this half.
    Lanes8 l;
    l.half = (c0 / 8) % 2;
    const int g0 = c0 - 8 * l.half;
    const __m256i live =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(rows - c0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256 live_ps = _mm256_castsi256_ps(live);
    const auto* groups = c0 < rows ? reinterpret_cast<const Group*>(w + g0 * row_bytes) : nullptr;
    __m256 s[kSubs], bias[kSubs];
    for (int64_t kk = 0; kk < kc; kk += 32) {
      const int64_t b = (k0 + kk) / T::kUnit;
      const int j = static_cast<int>(((k0 + kk) % T::kUnit) / 32);
      __m256i v[8];
      if (!groups) {
        for (int q = 0; q < 8; ++q) v[q] = _mm256_setzero_si256();
      } else if (p.layout.is_signed) {
        T::template values<true>(l, groups[b], j, v);
      } else {
        T::template values<false>(l, groups[b], j, v);
      }
      for (int q = 0; q < 8; ++q)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p.q + ((kk / 4 + q) * nr + c0) * 4),
                            _mm256_and_si256(v[q], live));
      if (j != 0) continue;
      for (int q = 0; q < kSubs; ++q) s[q] = bias[q] = _mm256_setzero_ps();
      if (groups) T::scales(l, groups[b], s, bias);
      const int64_t first = kk / T::kSub;  // the block's first sub-block in the panel
      for (int q = 0; q < kSubs; ++q) {
        _mm256_storeu_ps(p.scale + (first + q) * nr + c0, _mm256_and_ps(s[q], live_ps));
        if constexpr (T::kBias)
          _mm256_storeu_ps(p.bias + (first + q) * nr + c0, _mm256_and_ps(bias[q], live_ps));
      }
    }
  }
}

// Eight weight rows at a time: each row's 32 values (8 groups of 4) become one
// register, and the transpose turns them into 8 groups of 8 rows x 4 bytes,
// which is the panel's layout.
template <class U>
void x86_pack_typed(const uint8_t* w, int64_t row_bytes, int rows, int64_t k0, int64_t kc,
                    QuantPanel& p) {
  pack_scales<U>(w, row_bytes, rows, k0, kc, p);
  const int nr = p.nr;
  for (int c0 = 0; c0 < nr; c0 += 8) {
    const typename U::Block* blocks[8];
    for (int i = 0; i < 8; ++i)
      blocks[i] =
          c0 + i < rows
              ? reinterpret_cast<const typename U::Block*>(w + (c0 + i) * row_bytes) + k0 / U::kUnit
              : nullptr;
    for (int64_t k = 0; k < kc; k += 32) {
      __m256i v[8];
      const int64_t blk = k / U::kUnit;
      const int j = static_cast<int>((k % U::kUnit) / 32);
      for (int i = 0; i < 8; ++i)
        v[i] = blocks[i] ? SimdValues<U>::get(blocks[i][blk], j, p.layout.is_signed)
                         : _mm256_setzero_si256();
      simd::transpose8x8(v);
      uint8_t* dst = p.q + (k / 4 * nr + c0) * 4;
      for (int g = 0; g < 8; ++g)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + g * nr * 4), v[g]);
    }
  }
}

void x86_pack_quant(DType type, const uint8_t* w, int64_t row_bytes, int rows, int64_t k0,
                    int64_t kc, QuantPanel& p) {
  if (with_interleaved(
          type, [&](auto t) { x86_pack_interleaved<decltype(t)>(w, row_bytes, rows, k0, kc, p); }))
    return;
  with_unpacker(type, [&](auto u) { x86_pack_typed<decltype(u)>(w, row_bytes, rows, k0, kc, p); });
}

// 8 values of a float weight row as f32.
inline __m256 load8_as_f32(DType type, const uint8_t* row, int64_t k) {
  if (type == DType::F32) return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
  const __m128i h =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + k));
  if (type == DType::F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline float load1_as_f32(DType type, const uint8_t* row, int64_t k) {
  if (type == DType::F32) return reinterpret_cast<const float*>(row)[k];
  const uint16_t h = reinterpret_cast<const uint16_t*>(row)[k];
  if (type == DType::F16) return _cvtsh_ss(h);
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Panel [kc][nr] f32: 8 rows x 8 values at a time, transposed in registers;
// a tail of kc % 8 values one by one.
void x86_pack_float(DType type, const uint8_t* w, int64_t row_bytes, int rows, int nr, int64_t k0,
                    int64_t kc, float* panel) {
  const int64_t kv = kc / 8 * 8;
  for (int c0 = 0; c0 < nr; c0 += 8) {
    for (int64_t k = 0; k < kv; k += 8) {
      __m256i v[8];
      for (int i = 0; i < 8; ++i)
        v[i] = c0 + i < rows
                   ? _mm256_castps_si256(load8_as_f32(type, w + (c0 + i) * row_bytes, k0 + k))
                   : _mm256_setzero_si256();
      simd::transpose8x8(v);
      for (int g = 0; g < 8; ++g)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(panel + (k + g) * nr + c0), v[g]);
    }
    for (int64_t k = kv; k < kc; ++k)
      for (int i = 0; i < 8; ++i)
        panel[k * nr + c0 + i] =
            c0 + i < rows ? load1_as_f32(type, w + (c0 + i) * row_bytes, k0 + k) : 0.0f;
  }
}

// ---- micro-kernels -----------------------------------------------------

inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// MR activation rows x one quantised panel (2 vectors of columns).
template <class V, int MR, int kSub, bool kBias, bool kSigned>
void quant_tile(const QuantPanel& p, const ActQ8_G* x, int64_t xs, float* c, int64_t ldc, int cols,
                bool accumulate) {
  using I = typename V::I;
  using F = typename V::F;
  constexpr int L = V::kLanes;
  const int nr = p.nr;
  F acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = V::zerof();
  const int64_t nsub = p.kc / kSub;
  const uint8_t* q = p.q;
  for (int64_t j = 0; j < nsub; ++j, q += kSub * nr) {
    const int64_t blk = j * kSub / 32;
    const int half = kSub == 16 ? static_cast<int>(j & 1) : 0;
    I isum[MR][2];
    for (int r = 0; r < MR; ++r) {
      const ActQ8_G& a = x[r * xs + blk];
      if constexpr (!kBias && !kSigned) {
        const int s = kSub == 16 ? a.sum16[half] : a.sum16[0] + a.sum16[1];
        isum[r][0] = isum[r][1] = V::set1(-p.layout.offset * s);
      } else {
        isum[r][0] = isum[r][1] = V::zero();
      }
    }
    // Two groups of 4 values at a time: unsigned u <= 63 sums both groups'
    // products before one widening (V::dot2); signed ones take a dot each.
    for (int g = 0; g < kSub / 4; g += 2) {
      const uint8_t* qg = q + g * nr * 4;
      const I w0 = V::load(qg), w1 = V::load(qg + 4 * L);
      const I v0 = V::load(qg + nr * 4), v1 = V::load(qg + nr * 4 + 4 * L);
      for (int r = 0; r < MR; ++r) {
        const int8_t* xq = x[r * xs + blk].qs + 16 * half + 4 * g;
        const I xa = V::set1(load_i32(xq)), xb = V::set1(load_i32(xq + 4));
        if constexpr (kSigned) {
          isum[r][0] = V::dot_signed(V::dot_signed(isum[r][0], w0, xa), v0, xb);
          isum[r][1] = V::dot_signed(V::dot_signed(isum[r][1], w1, xa), v1, xb);
        } else {
          isum[r][0] = V::dot2(isum[r][0], w0, xa, v0, xb);
          isum[r][1] = V::dot2(isum[r][1], w1, xa, v1, xb);
        }
      }
    }
    const F s0 = V::loadf(p.scale + j * nr), s1 = V::loadf(p.scale + j * nr + L);
    for (int r = 0; r < MR; ++r) {
      const F dx = V::set1f(x[r * xs + blk].d);
      acc[r][0] = V::fmadd(V::cvt(isum[r][0]), V::mul(s0, dx), acc[r][0]);
      acc[r][1] = V::fmadd(V::cvt(isum[r][1]), V::mul(s1, dx), acc[r][1]);
    }
    if constexpr (kBias) {
      const F b0 = V::loadf(p.bias + j * nr), b1 = V::loadf(p.bias + j * nr + L);
      for (int r = 0; r < MR; ++r) {
        const ActQ8_G& a = x[r * xs + blk];
        const F bx = V::set1f(a.d * static_cast<float>(a.sum16[0] + a.sum16[1]));
        acc[r][0] = V::fmadd(b0, bx, acc[r][0]);
        acc[r][1] = V::fmadd(b1, bx, acc[r][1]);
      }
    }
  }
  for (int r = 0; r < MR; ++r) {
    V::store(c + r * ldc, acc[r][0], cols, accumulate);
    V::store(c + r * ldc + L, acc[r][1], cols - L, accumulate);
  }
}

template <class V, int kMr, int kSub, bool kBias, bool kSigned>
void quant_rows(const QuantPanel& p, const ActQ8_G* x, int64_t xs, int64_t m, float* c, int64_t ldc,
                int cols, bool accumulate) {
  int64_t r = 0;
  for (; r + kMr <= m; r += kMr)
    quant_tile<V, kMr, kSub, kBias, kSigned>(p, x + r * xs, xs, c + r * ldc, ldc, cols, accumulate);
  const int64_t rest = m - r;
  if (rest == 0) return;
  if constexpr (kMr > 1)
    quant_rows<V, (kMr > 4 ? 4 : kMr - 1), kSub, kBias, kSigned>(
        p, x + r * xs, xs, rest, c + r * ldc, ldc, cols, accumulate);
}

template <class V, int kMr>
void x86_gemm_quant(const QuantPanel& p, const ActQ8_G* x, int64_t xs, int64_t m, float* c,
                    int64_t ldc, int cols, bool accumulate) {
  const QuantLayout& l = p.layout;
  if (l.is_signed)
    return quant_rows<V, kMr, 32, false, true>(p, x, xs, m, c, ldc, cols, accumulate);
  if (l.has_bias) return quant_rows<V, kMr, 32, true, false>(p, x, xs, m, c, ldc, cols, accumulate);
  if (l.sub == 16)
    return quant_rows<V, kMr, 16, false, false>(p, x, xs, m, c, ldc, cols, accumulate);
  return quant_rows<V, kMr, 32, false, false>(p, x, xs, m, c, ldc, cols, accumulate);
}

// MR f32 activation rows x one f32 panel [kc][nr].
template <class V, int MR>
void float_tile(const float* panel, int nr, int64_t kc, const float* x, int64_t ldx, float* c,
                int64_t ldc, int cols, bool accumulate) {
  using F = typename V::F;
  constexpr int L = V::kLanes;
  F acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = V::zerof();
  for (int64_t k = 0; k < kc; ++k) {
    const F w0 = V::loadf(panel + k * nr), w1 = V::loadf(panel + k * nr + L);
    for (int r = 0; r < MR; ++r) {
      const F xb = V::set1f(x[r * ldx + k]);
      acc[r][0] = V::fmadd(w0, xb, acc[r][0]);
      acc[r][1] = V::fmadd(w1, xb, acc[r][1]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    V::store(c + r * ldc, acc[r][0], cols, accumulate);
    V::store(c + r * ldc + L, acc[r][1], cols - L, accumulate);
  }
}

template <class V, int kMr>
void float_rows(const float* panel, int nr, int64_t kc, const float* x, int64_t ldx, int64_t m,
                float* c, int64_t ldc, int cols, bool accumulate) {
  int64_t r = 0;
  for (; r + kMr <= m; r += kMr)
    float_tile<V, kMr>(panel, nr, kc, x + r * ldx, ldx, c + r * ldc, ldc, cols, accumulate);
  const int64_t rest = m - r;
  if (rest == 0) return;
  if constexpr (kMr > 1)
    float_rows<V, (kMr > 4 ? 4 : kMr - 1)>(panel, nr, kc, x + r * ldx, ldx, rest, c + r * ldc, ldc,
                                           cols, accumulate);
}

}  // namespace
}  // namespace loom::cpu::gemm
