// Paged KV cache writes and causal paged attention on the CPU.
// Cache layout: K and V [num_blocks, block_size, kv_heads, head_dim] in f32, f16,
// bf16 or FP8 E4M3 (with a dequantising scale per KV head, backend.h). Query token j of sequence s
// sits at position context_lens[s] - new_tokens(s) + j and sees keys at positions <= its own (and >
// pos - sliding_window when the window is set). Softmax is online, in f32, one key block at a time.
// Work items are (sequence, kv head, tile of query tokens), balanced over the threads by estimated
// cost.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "core/fp8.h"
#include "core/half.h"

namespace loom::cpu {
namespace {

void check_cache(const KvLayerCache& cache) {
  LOOM_CHECK(cache.k.ndim() == 4 && cache.k.shape() == cache.v.shape(),
             "kv cache K {} and V {} must be [blocks, block_size, kv_heads, head_dim]",
             shape_str(cache.k.shape()), shape_str(cache.v.shape()));
  LOOM_CHECK(cache.k.dtype() == cache.v.dtype(), "kv cache K and V dtypes differ");
  const DType t = cache.k.dtype();
  LOOM_CHECK(t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F8_E4M3,
             "kv cache dtype must be f32, f16, bf16 or f8_e4m3, got {}", dtype_name(t));
  if (t == DType::F8_E4M3)
    for (const Tensor* s : {&cache.k_scale, &cache.v_scale})
      LOOM_CHECK(
          s->device() == Device::Cpu && s->dtype() == DType::F32 && s->numel() == cache.k.dim(2),
          "an f8_e4m3 kv cache needs f32 scales [{}] (one per KV head), got {} {}", cache.k.dim(2),
          dtype_name(s->dtype()), shape_str(s->shape()));
}

// One slot's row [kv_heads * head_dim] stored as type t; scales: FP8's
// per-head scales (else unused).
void store_row(DType t, const float* src, void* dst, int64_t n, int64_t head_dim,
               const float* scales) {
  switch (t) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); break;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_f16(src[i]);
      break;
    case DType::F8_E4M3:
      for (int64_t h = 0; h < n / head_dim; ++h) {
        const float inv = 1.0f / scales[h];
        for (int64_t i = h * head_dim; i < (h + 1) * head_dim; ++i)
          static_cast<uint8_t*>(dst)[i] = f32_to_fp8_e4m3(src[i] * inv);
      }
      break;
    default:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_bf16(src[i]);
  }
}

struct WorkItem {
  int seq;
  int kv_head;
  int64_t tok_begin, tok_end;  // query tokens within the sequence
  double cost;
};

}  // namespace

void write_kv(ThreadPool& pool, const Tensor& k, const Tensor& v, KvLayerCache& cache,
              const AttentionMetadata& meta) {
  check_cache(cache);
  const int64_t slots = cache.k.dim(0) * cache.k.dim(1);
  const int64_t row = cache.k.dim(2) * cache.k.dim(3);
  LOOM_CHECK(k.dtype() == DType::F32 && v.dtype() == DType::F32, "write_kv k and v must be f32");
  const int64_t t = k.numel() / std::max<int64_t>(1, row);
  LOOM_CHECK(k.numel() == t * row && v.numel() == k.numel() && k.dim(0) == t,
             "write_kv k {} and v {} must be [T, {}, {}]", shape_str(k.shape()), shape_str(v.shape()),
             cache.k.dim(2), cache.k.dim(3));
  LOOM_CHECK(meta.slot_mapping.size() == static_cast<size_t>(t), "slot_mapping must have {} entries", t);
  const DType dt = cache.k.dtype();
  const int64_t row_bytes_c = row * dtype_info(dt).block_bytes;
  auto* kc = static_cast<uint8_t*>(cache.k.data());
  auto* vc = static_cast<uint8_t*>(cache.v.data());
  const float* ks = k.data_as<const float>();
  const float* vs = v.data_as<const float>();
  const int64_t hd = cache.k.dim(3);
  const bool fp8 = dt == DType::F8_E4M3;
  const float* k_scales = fp8 ? cache.k_scale.data_as<const float>() : nullptr;
  const float* v_scales = fp8 ? cache.v_scale.data_as<const float>() : nullptr;
  for (int64_t i = 0; i < t; ++i) {
    const int64_t slot = meta.slot_mapping[i];
    LOOM_CHECK(slot < slots, "slot {} out of range [0, {})", slot, slots);
  }
  parallel_rows(pool, t, 2 * row, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t slot = meta.slot_mapping[i];
      if (slot < 0) continue;  // padding token: nothing to store
      store_row(dt, ks + i * row, kc + slot * row_bytes_c, row, hd, k_scales);
      store_row(dt, vs + i * row, vc + slot * row_bytes_c, row, hd, v_scales);
    }
  });
}

void paged_attention(ThreadPool& pool, const Tensor& q, const KvLayerCache& cache,
                     const AttentionMetadata& meta, const AttentionParams& params, Tensor& out) {
  check_cache(cache);
  LOOM_CHECK(q.dtype() == DType::F32 && q.ndim() == 3, "attention q must be f32 [T, heads, head_dim], got {}",
             shape_str(q.shape()));
  const int64_t t = q.dim(0), heads = q.dim(1), hd = q.dim(2);
  const int64_t num_blocks = cache.k.dim(0), bs = cache.k.dim(1), kvh = cache.k.dim(2);
  LOOM_CHECK(cache.k.dim(3) == hd, "cache head_dim {} != q head_dim {}", cache.k.dim(3), hd);
  LOOM_CHECK(kvh > 0 && heads % kvh == 0, "heads {} must be a multiple of kv heads {}", heads, kvh);
  LOOM_CHECK(out.dtype() == DType::F32 && out.numel() == q.numel() && out.dim(0) == t,
             "attention out {} must be f32 like q {}", shape_str(out.shape()), shape_str(q.shape()));
  LOOM_CHECK(out.data() != q.data(), "attention cannot run in place");
  LOOM_CHECK(bs > 0, "block size must be > 0");
  check_attention_metadata(meta, t, bs, num_blocks);
  const int64_t group = heads / kvh;
  const DType dt = cache.k.dtype();
  const int64_t elem = dtype_info(dt).block_bytes;
  const int64_t slot_stride = kvh * hd;  // elements between consecutive slots

  // Work items: query tiles small enough that the accumulators stay in cache.
  const int64_t tile = std::max<int64_t>(1, 32 / group);
  std::vector<WorkItem> items;
  for (int s = 0; s < meta.num_seqs; ++s) {
    const int64_t n_new = meta.query_start[s + 1] - meta.query_start[s];
    const int64_t ctx = meta.context_lens[s];
    for (int64_t b = 0; b < n_new; b += tile) {
      const int64_t e = std::min(n_new, b + tile);
      int64_t keys = ctx - n_new + e;
      if (params.sliding_window > 0) keys = std::min<int64_t>(keys, params.sliding_window + (e - b));
      for (int h = 0; h < kvh; ++h)
        items.push_back({s, h, b, e, static_cast<double>(keys) * static_cast<double>(e - b + 1)});
    }
  }
  // Longest-first greedy assignment to threads (the pool splits work statically).
  const int nthreads = std::max(1, std::min<int>(pool.num_threads(), static_cast<int>(items.size())));
  std::vector<std::vector<int>> bins(static_cast<size_t>(nthreads));
  {
    std::vector<int> order(items.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return items[a].cost > items[b].cost; });
    std::vector<double> load(static_cast<size_t>(nthreads), 0.0);
    for (int i : order) {
      const auto it = std::min_element(load.begin(), load.end()) - load.begin();
      bins[it].push_back(i);
      load[it] += items[i].cost;
    }
  }

  const CpuKernels& kern = kernels_for(active_isa());
  const float* fp8_table = fp8_e4m3_table();
  const float* qs = q.data_as<const float>();
  float* os = out.data_as<float>();
  const auto* kbase = static_cast<const uint8_t*>(cache.k.data());
  const auto* vbase = static_cast<const uint8_t*>(cache.v.data());
  const float cap = params.logit_softcap;
  const float scale = params.scale;

  auto run_item = [&](const WorkItem& it, std::vector<float>& buf) {
    const int64_t n_new = meta.query_start[it.seq + 1] - meta.query_start[it.seq];
    const int64_t ctx = meta.context_lens[it.seq];
    const int64_t first_pos = ctx - n_new;  // position of the sequence's first new token
    const int64_t nq = it.tok_end - it.tok_begin;
    const int64_t rows = nq * group;  // (token, head) pairs of this item
    // Layout of buf: acc[rows*hd] | m[rows] | l[rows] | kf[bs*hd] | vf[bs*hd] | p[bs]
    buf.resize(static_cast<size_t>(rows * hd + 2 * rows + 2 * bs * hd + bs));
    float* acc = buf.data();
    float* mx = acc + rows * hd;
    float* sum = mx + rows;
    float* kf = sum + rows;
    float* vf = kf + bs * hd;
    float* p = vf + bs * hd;
    std::fill(acc, acc + rows * hd, 0.0f);
    std::fill(mx, mx + rows, -std::numeric_limits<float>::infinity());
    std::fill(sum, sum + rows, 0.0f);

    const int64_t pos_lo = first_pos + it.tok_begin, pos_hi = first_pos + it.tok_end - 1;
    const int64_t win = params.sliding_window;
    const int64_t key_lo = win > 0 ? std::max<int64_t>(0, pos_lo - win + 1) : 0;
    const int32_t* table = meta.block_tables.data() + static_cast<size_t>(it.seq) * meta.max_blocks_per_seq;
    for (int64_t blk = key_lo / bs; blk * bs <= pos_hi; ++blk) {
      const int64_t k0 = blk * bs, k1 = std::min(pos_hi + 1, k0 + bs);
      const int64_t nk = k1 - k0;
      // This kv head's rows of the block as f32: read in place from an f32
      // cache (rows kstride apart), converted into kf/vf otherwise.
      const int64_t base = (static_cast<int64_t>(table[blk]) * bs * slot_stride + it.kv_head * hd);
      const float* kr = kf;
      const float* vr = vf;
      int64_t kstride = hd;
      if (dt == DType::F32) {
        kr = reinterpret_cast<const float*>(kbase) + base;
        vr = reinterpret_cast<const float*>(vbase) + base;
        kstride = slot_stride;
      } else if (dt == DType::F8_E4M3) {
        const float ksc = cache.k_scale.data_as<const float>()[it.kv_head];
        const float vsc = cache.v_scale.data_as<const float>()[it.kv_head];
        for (int64_t i = 0; i < nk; ++i) {
          const uint8_t* kq = kbase + base + i * slot_stride;
          const uint8_t* vq = vbase + base + i * slot_stride;
          for (int64_t d = 0; d < hd; ++d) {
            kf[i * hd + d] = fp8_table[kq[d]] * ksc;
            vf[i * hd + d] = fp8_table[vq[d]] * vsc;
          }
        }
      } else {
        auto convert = dt == DType::F16 ? kern.f16_to_f32 : kern.bf16_to_f32;
        for (int64_t i = 0; i < nk; ++i) {
          const int64_t at = (base + i * slot_stride) * elem;
          convert(reinterpret_cast<const uint16_t*>(kbase + at), kf + i * hd, hd);
          convert(reinterpret_cast<const uint16_t*>(vbase + at), vf + i * hd, hd);
        }
      }
      for (int64_t j = 0; j < nq; ++j) {
        const int64_t pos = first_pos + it.tok_begin + j;
        const int64_t lo = std::max(k0, win > 0 ? pos - win + 1 : 0);
        const int64_t hi = std::min(k1, pos + 1);  // keys [lo, hi)
        if (lo >= hi) continue;
        const int64_t tok = meta.query_start[it.seq] + it.tok_begin + j;
        for (int64_t g = 0; g < group; ++g) {
          const int64_t head = it.kv_head * group + g;
          const float* qv = qs + (tok * heads + head) * hd;
          const int64_t r = j * group + g;
          float bmax = -std::numeric_limits<float>::infinity();
          for (int64_t key = lo; key < hi; ++key) {
            float s = kern.dot_f32(kr + (key - k0) * kstride, qv, hd) * scale;
            if (cap > 0) s = cap * std::tanh(s / cap);
            p[key - lo] = s;
            bmax = std::max(bmax, s);
          }
          const float m_new = std::max(mx[r], bmax);
          const float correction = std::exp(mx[r] - m_new);  // exp(-inf) = 0 on the first block
          float* a = acc + r * hd;
          if (correction != 1.0f) kern.scale(correction, a, hd);
          float l = sum[r] * correction;
          for (int64_t key = lo; key < hi; ++key) {
            const float e = std::exp(p[key - lo] - m_new);
            l += e;
            kern.axpy(e, vr + (key - k0) * kstride, a, hd);
          }
          sum[r] = l;
          mx[r] = m_new;
        }
      }
    }
    for (int64_t j = 0; j < nq; ++j) {
      const int64_t tok = meta.query_start[it.seq] + it.tok_begin + j;
      for (int64_t g = 0; g < group; ++g) {
        const int64_t r = j * group + g;
        float* o = os + (tok * heads + it.kv_head * group + g) * hd;
        const float inv = sum[r] > 0 ? 1.0f / sum[r] : 0.0f;
        for (int64_t d = 0; d < hd; ++d) o[d] = acc[r * hd + d] * inv;
      }
    }
  };

  pool.parallel_for(nthreads, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf;
    for (int64_t th = b; th < e; ++th)
      for (int i : bins[th]) run_item(items[i], buf);
  });
}

}  // namespace loom::cpu
