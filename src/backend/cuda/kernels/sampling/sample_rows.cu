// Sampling on the device (Backend::sample_rows): one block per spec, no sort.
// Each pass re-reads the spec's logits row (edits come from a per-spec bitmap
// and a table of edited values); thresholds are found by radix select over
// order-preserving 32-bit keys (four 8-bit digits, 256-bin shared histograms of
// count and fixed-point mass), and the draw is a block-wide prefix scan over
// contiguous per-thread chunks. Masses are integers, round(exp(x - max) * 2^32)
// from a polynomial built of correctly rounded operations only, so every sum is
// exact and a spec's token depends on nothing but its own row, edits and draw.
#include <cfloat>
#include <climits>
#include <type_traits>

#include "backend/cuda/kernels/common.cuh"
#include "backend/cuda/kernels/kernels.h"

namespace loom::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 256;
// Histogram copies indexed by lane % kReplicas, so that a warp whose values
// share one bin (common in the first digit: floats of one exponent) does not
// serialise on one address. Each entry packs count << 48 | mass; a copy sees
// at most vocab / 16 + 256 values (<= 2^19 / 16 + 256 < 2^16), each of mass
// <= 2^32, so neither field overflows.
constexpr int kReplicas = 16;
constexpr int kCountShift = 48;
constexpr uint64_t kMassMask = (uint64_t{1} << kCountShift) - 1;
constexpr uint32_t kAllTies = 0xffffffffu;

__device__ __forceinline__ float pos_inf() {
  return __int_as_float(0x7f800000);
}

// x is a candidate unless NaN or -inf; candidates map to keys > 0 ordered as
// the floats (-0 was made +0 on load), everything else to 0.
__device__ __forceinline__ uint32_t order_key(float x) {
  if (!(x > -pos_inf())) return 0;
  const uint32_t b = __float_as_uint(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float key_value(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// round(exp(x - mx) * 2^32) for x <= mx: Cody-Waite reduction and a degree-6
// polynomial, every step a correctly rounded f32 operation (the tests repeat
// it bit for bit on the host). 0 below exp(-24).
__device__ __forceinline__ uint64_t fixed_mass(float x, float mx) {
  const float d = __fsub_rn(x, mx);
  if (!(d >= -24.0f)) return 0;
  const float kf = rintf(__fmul_rn(d, 0x1.715476p+0f));
  float r = __fmaf_rn(kf, -0x1.62e4p-1f, d);
  r = __fmaf_rn(kf, -0x1.7f7d1cp-20f, r);
  float p = 0x1.6c16c2p-10f;
  p = __fmaf_rn(p, r, 0x1.111112p-7f);
  p = __fmaf_rn(p, r, 0x1.555556p-5f);
  p = __fmaf_rn(p, r, 0x1.555556p-3f);
  p = __fmaf_rn(p, r, 0.5f);
  p = __fmaf_rn(p, r, 1.0f);
  p = __fmaf_rn(p, r, 1.0f);
  const uint64_t q = static_cast<uint64_t>(__fmul_rn(p, 16777216.0f));  // p * 2^24, an integer
  const int s = -(8 + static_cast<int>(kf));  // mass = q * 2^-s, s in [-8, 27]
  if (s <= 0) return q << -s;
  return (q + (uint64_t{1} << (s - 1))) >> s;
}


// One spec's row as the passes see it: x = logits * inv_t, or the edited value.
template <class T>
struct RowView {
  const T* row;
  int32_t vocab;
  bool vec;  // 16-byte loads of whole groups (vocab % 8 == 0, aligned rows)
  float inv_t;
  const uint32_t* bitmap;  // null when the spec has no edits
  const uint32_t* prefix;  // edits in words before each bitmap word
  const float* values;     // edited x, by rank of the token among the edited ones
};

// The 8 values of group g (tokens 8g .. 8g + 7); tokens past the vocab are NaN.
template <class T>
__device__ __forceinline__ void load_group(const RowView<T>& v, int32_t g, float (&x)[8]) {
  const int32_t t0 = g * 8;
  if (v.vec) {
    load8(v.row + t0, x);
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j)
      x[j] = t0 + j < v.vocab ? to_float(v.row[t0 + j]) : __int_as_float(0x7fc00000);
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) x[j] = __fmul_rn(x[j], v.inv_t);
  if (v.bitmap) {
    const uint32_t word = v.bitmap[g >> 2];
    const int sh = (g & 3) * 8;
    if ((word >> sh) & 0xffu) {
      const uint32_t base = v.prefix[g >> 2];
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if ((word >> (sh + j)) & 1u) x[j] = v.values[base + __popc(word & ((1u << (sh + j)) - 1u))];
    }
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    if (x[j] == pos_inf()) x[j] = FLT_MAX;  // +inf: the largest finite value
    if (x[j] == 0.0f) x[j] = 0.0f;          // -0 -> +0 (equal floats, equal keys)
  }
}

struct Shared {
  uint64_t hist[kBins * kReplicas];
  uint64_t bin_mass[kBins];
  uint64_t first_mass[kBins];  // the first digit's histogram, shared by top-k and top-p
  uint32_t bin_cnt[kBins];
  uint32_t first_cnt[kBins];
  uint64_t scan[kWarps + 1];
  float fmax[kWarps + 1];
  // select_bin's answer
  uint64_t sel_cnt_before, sel_mass_before, sel_cnt, sel_mass;
  uint32_t sel_bin;
  int32_t token;
};

// Exclusive prefix sum over the block in thread order; `total` gets the sum.
__device__ __forceinline__ uint64_t block_exclusive_scan(uint64_t v, Shared& s, uint64_t& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint64_t incl = v;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const uint64_t o = __shfl_up_sync(0xffffffffu, incl, off);
    if (lane >= off) incl += o;
  }
  if (lane == 31) s.scan[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const uint64_t w = lane < kWarps ? s.scan[lane] : 0;
    uint64_t wi = w;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const uint64_t o = __shfl_up_sync(0xffffffffu, wi, off);
      if (lane >= off) wi += o;
    }
    if (lane < kWarps) s.scan[lane] = wi - w;
    if (lane == kWarps - 1) s.scan[kWarps] = wi;
  }
  __syncthreads();
  const uint64_t r = s.scan[warp] + incl - v;
  total = s.scan[kWarps];
  __syncthreads();  // s.scan is free again
  return r;
}

__device__ __forceinline__ float block_max(float v, Shared& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  if (lane == 0) s.fmax[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < kWarps ? s.fmax[lane] : -pos_inf();
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) w = fmaxf(w, __shfl_xor_sync(0xffffffffu, w, off));
    if (lane == 0) s.fmax[kWarps] = w;
  }
  __syncthreads();
  const float r = s.fmax[kWarps];
  __syncthreads();
  return r;
}

// Histogram (count and, with kMass, fixed-point mass) of digit `shift` of the
// keys of candidates whose higher digits equal `prefix` (all candidates when
// first). On entry s.hist is zero; on exit it is zero again and the bins are in
// s.bin_cnt / s.bin_mass (and s.first_* when first).
template <class T, bool kMass>
__device__ void histogram_pass(Shared& s, const RowView<T>& v, int32_t groups, bool first,
                               uint32_t prefix, int shift, float mx) {
  const int rep = threadIdx.x & (kReplicas - 1);
  for (int32_t g = threadIdx.x; g < groups; g += kThreads) {
    float x[8];
    load_group(v, g, x);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t key = order_key(x[j]);
      if (key == 0 || (!first && (key >> (shift + 8)) != prefix)) continue;
      uint64_t add = uint64_t{1} << kCountShift;
      if (kMass) add |= fixed_mass(x[j], mx);
      atomicAdd(reinterpret_cast<unsigned long long*>(
                    &s.hist[((key >> shift) & 0xffu) * kReplicas + rep]),
                static_cast<unsigned long long>(add));
    }
  }
  __syncthreads();
  // Two threads per bin, kReplicas / 2 copies each.
  const int bin = threadIdx.x >> 1, half = threadIdx.x & 1;
  uint64_t cnt = 0, mass = 0;
#pragma unroll
  for (int r = 0; r < kReplicas / 2; ++r) {
    uint64_t& h = s.hist[bin * kReplicas + half * (kReplicas / 2) + r];
    cnt += h >> kCountShift;
    mass += h & kMassMask;
    h = 0;
  }
  cnt += __shfl_xor_sync(0xffffffffu, cnt, 1);
  mass += __shfl_xor_sync(0xffffffffu, mass, 1);
  if (half == 0) {
    s.bin_cnt[bin] = static_cast<uint32_t>(cnt);
    s.bin_mass[bin] = mass;
    if (first) {
      s.first_cnt[bin] = static_cast<uint32_t>(cnt);
      s.first_mass[bin] = mass;
    }
  }
  __syncthreads();
}
static_assert(kThreads == 2 * kBins, "histogram_pass reduces with two threads per bin");

// The bin, walking from the highest down, in which the running count (or mass)
// first reaches target (1 <= target <= the histogram's total), with the count
// and mass of the bins above it.
__device__ void select_bin(Shared& s, const uint32_t* cnt, const uint64_t* mass, uint64_t target,
                           bool by_mass) {
  __syncthreads();  // every thread has read the previous answer
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    uint64_t lc = 0, lm = 0;  // lane covers bins 255 - 8 lane down to 248 - 8 lane
    for (int i = 0; i < 8; ++i) {
      const int b = kBins - 1 - 8 * lane - i;
      lc += cnt[b];
      lm += mass[b];
    }
    uint64_t ic = lc, im = lm;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const uint64_t oc = __shfl_up_sync(0xffffffffu, ic, off);
      const uint64_t om = __shfl_up_sync(0xffffffffu, im, off);
      if (lane >= off) ic += oc, im += om;
    }
    uint64_t cb = ic - lc, mb = im - lm;
    for (int i = 0; i < 8; ++i) {
      const int b = kBins - 1 - 8 * lane - i;
      const uint64_t c = cnt[b], m = mass[b];
      const uint64_t before = by_mass ? mb : cb, val = by_mass ? m : c;
      if (before < target && target <= before + val) {
        s.sel_bin = static_cast<uint32_t>(b);
        s.sel_cnt_before = cb;
        s.sel_mass_before = mb;
        s.sel_cnt = c;
        s.sel_mass = m;
      }
      cb += c;
      mb += m;
    }
  }
  __syncthreads();
}

// Keeps a token iff key > k, or key == k and fewer than c earlier tokens have
// key k. Intersects two such prefixes of the order (value desc, id asc).
struct Cut {
  uint32_t k = 0;
  uint32_t c = kAllTies;
};
__device__ __forceinline__ Cut intersect(Cut a, Cut b) {
  if (a.k != b.k) return a.k > b.k ? a : b;
  return Cut{a.k, min(a.c, b.c)};
}

template <class T>
__global__ void __launch_bounds__(kThreads, 2)
    sample_rows_kernel(const T* logits, int32_t vocab, bool vec, const SampleRowSpec* specs,
                       const SampleRowEdit* edits, uint32_t* bitmaps, uint32_t* prefixes,
                       float* values, int32_t* out) {
  __shared__ Shared s;
  const SampleRowSpec sp = specs[blockIdx.x];
  const int32_t words = (vocab + 31) / 32, groups = (vocab + 7) / 8;
  const int tid = threadIdx.x;
  RowView<T> v{logits + static_cast<int64_t>(sp.row) * vocab,
               vocab,
               vec,
               sp.inv_temperature,
               nullptr,
               nullptr,
               nullptr};
  for (int i = tid; i < kBins * kReplicas; i += kThreads) s.hist[i] = 0;
  if (tid == 0) s.token = -1;

  // Edits: mark their tokens, rank them, store each edited x at its rank.
  const int32_t num_edits = sp.edits_end - sp.edits_begin;
  if (num_edits > 0) {
    uint32_t* bitmap = bitmaps + static_cast<int64_t>(blockIdx.x) * words;
    uint32_t* prefix = prefixes + static_cast<int64_t>(blockIdx.x) * words;
    float* val = values + sp.values_begin;
    const SampleRowEdit* e = edits + sp.edits_begin;
    for (int32_t i = tid; i < num_edits; i += kThreads)
      atomicOr(&bitmap[e[i].token >> 5], 1u << (e[i].token & 31));
    __syncthreads();
    const int32_t per = (words + kThreads - 1) / kThreads;
    const int32_t w0 = min(tid * per, words), w1 = min(w0 + per, words);
    uint64_t ones = 0, total = 0;
    for (int32_t w = w0; w < w1; ++w) ones += __popc(bitmap[w]);
    uint32_t before = static_cast<uint32_t>(block_exclusive_scan(ones, s, total));
    for (int32_t w = w0; w < w1; ++w) {
      prefix[w] = before;
      before += __popc(bitmap[w]);
    }
    __syncthreads();
    for (int32_t i = tid; i < num_edits; i += kThreads) {
      const SampleRowEdit ed = e[i];
      const int32_t t = ed.token;
      const uint32_t rank = prefix[t >> 5] + __popc(bitmap[t >> 5] & ((1u << (t & 31)) - 1u));
      float x = to_float(v.row[t]);
      if (ed.rep != 1.0f) x = x > 0.0f ? __fdiv_rn(x, ed.rep) : __fmul_rn(x, ed.rep);
      x = __fsub_rn(x, ed.sub);
      x = __fadd_rn(x, ed.add);
      if (ed.ban) x = -pos_inf();
      val[rank] = __fmul_rn(x, sp.inv_temperature);
    }
    __syncthreads();
    v.bitmap = bitmap;
    v.prefix = prefix;
    v.values = val;
  }

  // Pass 0: the largest candidate and the number of candidates.
  float lmax = -pos_inf();
  uint64_t lcount = 0;
  for (int32_t g = tid; g < groups; g += kThreads) {
    float x[8];
    load_group(v, g, x);
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (x[j] > -pos_inf()) lmax = fmaxf(lmax, x[j]), ++lcount;
  }
  const float mx = block_max(lmax, s);
  uint64_t candidates = 0;
  block_exclusive_scan(lcount, s, candidates);
  if (candidates == 0) {
    if (tid == 0) out[specs[blockIdx.x].out] = 0;
    return;
  }
  const uint32_t max_key = order_key(mx);

  const bool top_k_on = sp.top_k > 0 && static_cast<uint64_t>(sp.top_k) < candidates;
  const bool top_p_on = sp.top_p_on != 0;
  Cut cut;
  uint64_t z = 0;  // mass of the top-k set (all candidates without top-k)
  if (top_k_on || top_p_on) {
    if (top_p_on)
      histogram_pass<T, true>(s, v, groups, true, 0, 24, mx);
    else
      histogram_pass<T, false>(s, v, groups, true, 0, 24, mx);
  }
  if (top_k_on) {
    uint64_t k_rem = static_cast<uint64_t>(sp.top_k), mass_above = 0;
    uint32_t prefix = 0;
    for (int d = 0; d < 4; ++d) {
      const int shift = 24 - 8 * d;
      if (d > 0) {
        if (top_p_on)
          histogram_pass<T, true>(s, v, groups, false, prefix, shift, mx);
        else
          histogram_pass<T, false>(s, v, groups, false, prefix, shift, mx);
      }
      select_bin(s, s.bin_cnt, s.bin_mass, k_rem, false);
      k_rem -= s.sel_cnt_before;
      mass_above += s.sel_mass_before;
      prefix = (prefix << 8) | s.sel_bin;
      const uint64_t bin_cnt = s.sel_cnt, bin_mass = s.sel_mass;
      if (bin_cnt == k_rem) {  // the whole bin is kept
        cut = Cut{prefix << shift, kAllTies};
        z = mass_above + bin_mass;
        break;
      }
      if (d == 3) {
        cut = Cut{prefix, static_cast<uint32_t>(k_rem)};
        z = mass_above + k_rem * fixed_mass(key_value(prefix), mx);
      }
    }
  } else if (top_p_on && tid < 32) {
    uint64_t m = 0;
    for (int b = tid; b < kBins; b += 32) m += s.first_mass[b];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m += __shfl_xor_sync(0xffffffffu, m, off);
    if (tid == 0) s.sel_mass = m;
  }
  if (!top_k_on && top_p_on) {
    __syncthreads();
    z = s.sel_mass;
    __syncthreads();
  }

  if (top_p_on) {
    // Shortest prefix whose mass reaches top_p * z: t = ceil(top_p64 * z / 2^64).
    const uint64_t t = __umul64hi(sp.top_p64, z) + (sp.top_p64 * z != 0 ? 1 : 0);
    Cut p{max_key, 1};
    if (t > 0) {
      uint64_t t_rem = t;
      uint32_t prefix = 0;
      for (int d = 0; d < 4; ++d) {
        const int shift = 24 - 8 * d;
        if (d > 0) histogram_pass<T, true>(s, v, groups, false, prefix, shift, mx);
        select_bin(s, d == 0 ? s.first_cnt : s.bin_cnt, d == 0 ? s.first_mass : s.bin_mass, t_rem,
                   true);
        t_rem -= s.sel_mass_before;
        prefix = (prefix << 8) | s.sel_bin;
        if (s.sel_cnt == 1) {  // the crossing token alone in its bin
          p = Cut{prefix << shift, kAllTies};
          break;
        }
        if (d == 3) {
          const uint64_t m = fixed_mass(key_value(prefix), mx);  // > 0: the bin reached t
          p = Cut{prefix, static_cast<uint32_t>((t_rem + m - 1) / m)};
        }
      }
    }
    cut = intersect(cut, p);
  }

  float min_x = -pos_inf();
  if (sp.min_p_on) {
    const float c = __fadd_rn(mx, sp.log_min_p);
    if (mx >= c)
      min_x = c;
    else
      cut = intersect(cut, Cut{max_key, 1});
  }

  // The draw: kept tokens in id order, thread i owning a contiguous chunk.
  const uint64_t tie_mass = fixed_mass(key_value(cut.k), mx);
  const int32_t per = (groups + kThreads - 1) / kThreads;
  const int32_t g0 = min(tid * per, groups), g1 = min(g0 + per, groups);
  uint64_t above = 0, ties = 0;
  for (int32_t g = g0; g < g1; ++g) {
    float x[8];
    load_group(v, g, x);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t key = order_key(x[j]);
      if (key == 0 || !(x[j] >= min_x)) continue;
      if (key > cut.k)
        above += fixed_mass(x[j], mx);
      else if (key == cut.k)
        ++ties;
    }
  }
  uint64_t unused = 0, total = 0;
  const uint64_t ties_before = block_exclusive_scan(ties, s, unused);
  uint64_t kept_ties = ties;
  if (cut.c != kAllTies) kept_ties = ties_before >= cut.c ? 0 : min(ties, cut.c - ties_before);
  const uint64_t chunk = above + kept_ties * tie_mass;
  const uint64_t before = block_exclusive_scan(chunk, s, total);
  const uint64_t target = __umul64hi(sp.uniform64, total);  // < total
  if (chunk > 0 && before <= target && target - before < chunk) {
    uint64_t cum = before, rank = ties_before;
    int32_t token = -1;
    for (int32_t g = g0; g < g1 && token < 0; ++g) {
      float x[8];
      load_group(v, g, x);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint32_t key = order_key(x[j]);
        if (token >= 0 || key == 0 || !(x[j] >= min_x) || key < cut.k) continue;
        if (key == cut.k && rank++ >= cut.c) continue;
        cum += fixed_mass(x[j], mx);
        if (target < cum) token = g * 8 + j;
      }
    }
    s.token = token;
  }
  __syncthreads();
  if (tid == 0) out[specs[blockIdx.x].out] = s.token < 0 ? 0 : s.token;
}

template <class T>
void launch(const void* logits, int64_t vocab, const SampleRowSpec* specs, int32_t num_specs,
            const SampleRowEdit* edits, uint32_t* bitmap, uint32_t* prefix, float* values,
            int32_t* out, cudaStream_t stream) {
  const bool vec = vocab % 8 == 0 && aligned16(logits);
  sample_rows_kernel<T><<<static_cast<unsigned>(num_specs), kThreads, 0, stream>>>(
      static_cast<const T*>(logits), static_cast<int32_t>(vocab), vec, specs, edits, bitmap, prefix,
      values, out);
}

}  // namespace

void sample_rows(DType type, const void* logits, int64_t vocab, const SampleRowSpec* specs,
                 int32_t num_specs, const SampleRowEdit* edits, uint32_t* edit_bitmap,
                 uint32_t* edit_prefix, float* edit_values, int32_t* out, cudaStream_t stream) {
  if (num_specs <= 0 || vocab <= 0) return;
  switch (type) {
    case DType::F32:
      launch<float>(logits, vocab, specs, num_specs, edits, edit_bitmap, edit_prefix, edit_values,
                    out, stream);
      break;
    case DType::F16:
      launch<__half>(logits, vocab, specs, num_specs, edits, edit_bitmap, edit_prefix, edit_values,
                     out, stream);
      break;
    default:
      launch<bf16>(logits, vocab, specs, num_specs, edits, edit_bitmap, edit_prefix, edit_values,
                   out, stream);
      break;
  }
}

}  // namespace loom::cuda
