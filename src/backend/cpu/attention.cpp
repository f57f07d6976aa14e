// Paged KV cache writes and causal paged attention on the CPU.
// Cache layout: K and V [num_blocks, block_size, kv_heads, head_dim] in f32, f16,
// bf16 or FP8 E4M3 (with a dequantising scale per KV head, backend.h). Query
// token j of sequence s sits at position context_lens[s] - new_tokens(s) + j and
// sees keys at positions <= its own (and > pos - sliding_window when the window
// is set). Blocked like flash attention: a work item is (sequence, kv head, tile
// of query tokens), whose query rows (the tile's tokens x the heads sharing the
// kv head) meet the keys in chunks of kKeyChunk: one small GEMM for the scores,
// exp per row against the chunk's max, one small GEMM for P.V, and the chunk's
// partial merged into the row's running result (rescaled to the larger max).
// Items are balanced over the threads by estimated cost; when there are fewer
// items than threads (decode of few long sequences), an item's chunks are
// split over threads and their partials merged afterwards in the same order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>
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
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      break;
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

constexpr int64_t kKeyChunk = 64;  // keys per chunk (a multiple of 16)
constexpr int64_t kTileRows = 64;  // query rows (tokens x grouped heads) per work item

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
             "write_kv k {} and v {} must be [T, {}, {}]", shape_str(k.shape()),
             shape_str(v.shape()), cache.k.dim(2), cache.k.dim(3));
  LOOM_CHECK(meta.slot_mapping.size() == static_cast<size_t>(t),
             "slot_mapping must have {} entries", t);
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
  LOOM_CHECK(q.dtype() == DType::F32 && q.ndim() == 3,
             "attention q must be f32 [T, heads, head_dim], got {}", shape_str(q.shape()));
  const int64_t t = q.dim(0), heads = q.dim(1), hd = q.dim(2);
  const int64_t num_blocks = cache.k.dim(0), bs = cache.k.dim(1), kvh = cache.k.dim(2);
  LOOM_CHECK(cache.k.dim(3) == hd, "cache head_dim {} != q head_dim {}", cache.k.dim(3), hd);
  LOOM_CHECK(kvh > 0 && heads % kvh == 0, "heads {} must be a multiple of kv heads {}", heads, kvh);
  LOOM_CHECK(out.dtype() == DType::F32 && out.numel() == q.numel() && out.dim(0) == t,
             "attention out {} must be f32 like q {}", shape_str(out.shape()),
             shape_str(q.shape()));
  LOOM_CHECK(out.data() != q.data(), "attention cannot run in place");
  LOOM_CHECK(bs > 0, "block size must be > 0");
  check_attention_metadata(meta, t, bs, num_blocks);
  const int64_t group = heads / kvh;
  const DType dt = cache.k.dtype();
  const int64_t elem = dtype_info(dt).block_bytes;
  const int64_t slot_stride = kvh * hd;  // elements between consecutive slots

  // Work items: query tiles small enough that the accumulators stay in cache.
  const int64_t tile = std::max<int64_t>(1, kTileRows / group);
  const int64_t ldk = kKeyChunk;
  const int64_t win = params.sliding_window;
  std::vector<WorkItem> items;
  // One allocation per list whatever the batch (a decode step: one tile per
  // sequence and kv head).
  items.reserve(static_cast<size_t>(meta.num_seqs * kvh));
  for (int s = 0; s < meta.num_seqs; ++s) {
    const int64_t n_new = meta.query_start[s + 1] - meta.query_start[s];
    const int64_t ctx = meta.context_lens[s];
    for (int64_t b = 0; b < n_new; b += tile) {
      const int64_t e = std::min(n_new, b + tile);
      int64_t keys = ctx - n_new + e;
      if (win > 0) keys = std::min<int64_t>(keys, win + (e - b));
      for (int h = 0; h < kvh; ++h)
        items.push_back({s, h, b, e, static_cast<double>(keys) * static_cast<double>(e - b + 1)});
    }
  }
  // An item's key chunks: [chunk_begin, chunk_end) in units of ldk keys.
  auto chunk_range = [&](const WorkItem& it) {
    const int64_t n_new = meta.query_start[it.seq + 1] - meta.query_start[it.seq];
    const int64_t first_pos = meta.context_lens[it.seq] - n_new;
    const int64_t pos_lo = first_pos + it.tok_begin, pos_hi = first_pos + it.tok_end - 1;
    const int64_t key_lo = win > 0 ? std::max<int64_t>(0, pos_lo - win + 1) : 0;
    return std::pair<int64_t, int64_t>{key_lo / ldk, pos_hi / ldk + 1};
  };
  // Few items (decode of few sequences with long contexts, on many threads):
  // an item's chunks are split into pieces that run in parallel, each
  // chunk's partial result kept and merged afterwards. The merge is the one
  // an unsplit item runs as it goes, in the same chunk order, so a query's
  // output does not depend on whether (or how) its item was split.
  const int pool_threads = std::max(1, pool.num_threads());
  struct Piece {
    int item;
    int64_t chunk_begin, chunk_end;
    double cost;
  };
  std::vector<Piece> pieces;
  pieces.reserve(items.size());
  std::vector<int64_t> part_offset(items.size(), -1);  // split items: first partial's slot
  int64_t part_slots = 0;
  {
    const int64_t want = 2 * static_cast<int64_t>(pool_threads);
    double total = 0;
    for (const WorkItem& it : items) total += it.cost;
    const bool split = static_cast<int64_t>(items.size()) < pool_threads;
    for (size_t i = 0; i < items.size(); ++i) {
      const auto [c0, c1] = chunk_range(items[i]);
      const int64_t chunks = c1 - c0;
      int64_t n_pieces = 1;
      if (split && total > 0)
        n_pieces = std::clamp<int64_t>(
            static_cast<int64_t>(std::lround(static_cast<double>(want) * items[i].cost / total)), 1,
            chunks);
      if (n_pieces > 1) {
        part_offset[i] = part_slots;
        part_slots += chunks;
      }
      for (int64_t p = 0; p < n_pieces; ++p) {
        const int64_t b = c0 + chunks * p / n_pieces, e = c0 + chunks * (p + 1) / n_pieces;
        pieces.push_back(
            {static_cast<int>(i), b, e,
             items[i].cost * static_cast<double>(e - b) / static_cast<double>(chunks)});
      }
    }
  }
  // Longest-first greedy assignment to threads (the pool splits work statically).
  const int nthreads = std::max(1, std::min<int>(pool_threads, static_cast<int>(pieces.size())));
  std::vector<std::vector<int>> bins(static_cast<size_t>(nthreads));
  // Each bin's even share (equal costs, a decode step's usual case, fill
  // them exactly; uneven ones may grow a bin).
  for (std::vector<int>& bin : bins) bin.reserve(pieces.size() / static_cast<size_t>(nthreads) + 1);
  {
    std::vector<int> order(pieces.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return pieces[a].cost > pieces[b].cost; });
    std::vector<double> load(static_cast<size_t>(nthreads), 0.0);
    for (int i : order) {
      const auto it = std::min_element(load.begin(), load.end()) - load.begin();
      bins[it].push_back(i);
      load[it] += pieces[i].cost;
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
  const float neg_inf = -std::numeric_limits<float>::infinity();

  // A chunk's partial result for R rows: per row the max of its visible
  // scores (-inf: none visible), the sum of exp(score - max), and P.V with
  // those weights. Partials of split items live in `parts`, one slot per
  // chunk: acc [R * hd] | max [R] | sum [R].
  auto part_floats = [&](int64_t rows) { return rows * hd + 2 * rows; };
  std::vector<float> parts;
  int64_t part_stride = 0;  // floats per slot: sized for the largest tile
  if (part_slots > 0) {
    part_stride = part_floats(tile * group);
    parts.resize(static_cast<size_t>(part_slots * part_stride));
  }
  // The running result (acc, mx, sum) absorbs a chunk's partial: rescaled
  // to the larger of the two maxima.
  auto merge = [&](int64_t rows, float* acc, float* mx, float* sum, const float* pacc,
                   const float* pmax, const float* psum) {
    for (int64_t r = 0; r < rows; ++r) {
      if (pmax[r] == neg_inf) continue;  // nothing visible in this chunk
      const float m_new = std::max(mx[r], pmax[r]);
      const float a = std::exp(mx[r] - m_new);  // exp(-inf) = 0 before the first chunk
      const float b = std::exp(pmax[r] - m_new);
      if (a != 1.0f) kern.scale(a, acc + r * hd, hd);
      kern.axpy(b, pacc + r * hd, acc + r * hd, hd);
      sum[r] = sum[r] * a + psum[r] * b;
      mx[r] = m_new;
    }
  };
  auto finish = [&](const WorkItem& it, const float* acc, const float* sum) {
    for (int64_t j = 0; j < it.tok_end - it.tok_begin; ++j) {
      const int64_t tok = meta.query_start[it.seq] + it.tok_begin + j;
      for (int64_t g = 0; g < group; ++g) {
        const int64_t r = j * group + g;
        float* o = os + (tok * heads + it.kv_head * group + g) * hd;
        const float inv = sum[r] > 0 ? 1.0f / sum[r] : 0.0f;
        for (int64_t d = 0; d < hd; ++d) o[d] = acc[r * hd + d] * inv;
      }
    }
  };

  // One piece: its item's R = nq * group query rows (token-major,
  // pre-scaled) against the piece's chunks of kKeyChunk keys. Per chunk:
  // S = Q.K^T into a tile, masks, exp per row against the row's chunk max,
  // P.V into a fresh accumulator; the chunk's K is transposed to [hd][ldk] so
  // the score kernel runs along keys, V stays [keys][hd]. Chunks start at
  // multiples of ldk whatever the tile: a key's place in its chunk (its lane
  // in the softmax sums) and the merges are then the same for a query alone
  // (decode) and in any tile (prefill), so its output does not depend on the
  // tokens it is computed with. Keys before key_lo (outside every row's
  // window) are zero and masked.
  auto run_piece = [&](const Piece& pc, std::vector<float>& buf) {
    const WorkItem& it = items[static_cast<size_t>(pc.item)];
    const int64_t n_new = meta.query_start[it.seq + 1] - meta.query_start[it.seq];
    const int64_t ctx = meta.context_lens[it.seq];
    const int64_t first_pos = ctx - n_new;  // position of the sequence's first new token
    const int64_t nq = it.tok_end - it.tok_begin;
    const int64_t rows = nq * group;
    const bool split = part_offset[static_cast<size_t>(pc.item)] >= 0;
    // Split items: chunk c's partial in slot part0 + c of `parts`.
    const int64_t part0 =
        split ? part_offset[static_cast<size_t>(pc.item)] - chunk_range(it).first : 0;
    // buf: qt[rows*hd] | acc[rows*hd] | m[rows] | l[rows] | kt[hd*ldk] | vb[ldk*hd] | s[rows*ldk] |
    // conv[min(bs, ldk)*hd] (one paged block's keys of a chunk) | pacc[rows*hd] | pmax[rows] |
    // psum[rows]
    buf.resize(static_cast<size_t>(2 * rows * hd + 2 * rows + 2 * hd * ldk + rows * ldk +
                                   std::min(bs, ldk) * hd + part_floats(rows)));
    float* qt = buf.data();
    float* acc = qt + rows * hd;
    float* mx = acc + rows * hd;
    float* sum = mx + rows;
    float* kt = sum + rows;
    float* vb = kt + hd * ldk;
    float* sc = vb + ldk * hd;
    float* conv = sc + rows * ldk;
    float* own_part = conv + std::min(bs, ldk) * hd;
    for (int64_t j = 0; j < nq; ++j) {
      const int64_t tok = meta.query_start[it.seq] + it.tok_begin + j;
      for (int64_t g = 0; g < group; ++g) {
        const float* src = qs + (tok * heads + it.kv_head * group + g) * hd;
        float* dst = qt + (j * group + g) * hd;
        for (int64_t d = 0; d < hd; ++d) dst[d] = src[d] * scale;
      }
    }
    std::fill(acc, acc + rows * hd, 0.0f);
    std::fill(mx, mx + rows, neg_inf);
    std::fill(sum, sum + rows, 0.0f);

    const int64_t pos_lo = first_pos + it.tok_begin, pos_hi = first_pos + it.tok_end - 1;
    const int64_t key_lo = win > 0 ? std::max<int64_t>(0, pos_lo - win + 1) : 0;
    const int32_t* table =
        meta.block_tables.data() + static_cast<size_t>(it.seq) * meta.max_blocks_per_seq;
    // Rows [i0, i0 + n) of a key chunk lie in one paged block, slot_stride
    // apart; K goes transposed into kt, V into vb converted via conv (an f32
    // cache's V rows are read where they lie, by P.V segment by segment).
    auto slot_of = [&](int64_t key) {
      return (static_cast<int64_t>(table[key / bs]) * bs + key % bs) * slot_stride +
             it.kv_head * hd;
    };
    auto load_segment = [&](int64_t key, int64_t n, int64_t i0) {
      const int64_t at = slot_of(key);
      if (dt == DType::F32) {
        kern.transpose(reinterpret_cast<const float*>(kbase) + at, n, hd, slot_stride, kt + i0,
                       ldk);
        return;
      }
      if (dt == DType::F8_E4M3) {
        const float ksc = cache.k_scale.data_as<const float>()[it.kv_head];
        const float vsc = cache.v_scale.data_as<const float>()[it.kv_head];
        for (int64_t i = 0; i < n; ++i) {
          const uint8_t* kq = kbase + at + i * slot_stride;
          const uint8_t* vq = vbase + at + i * slot_stride;
          float* vrow = vb + (i0 + i) * hd;
          for (int64_t d = 0; d < hd; ++d) {
            conv[i * hd + d] = fp8_table[kq[d]] * ksc;
            vrow[d] = fp8_table[vq[d]] * vsc;
          }
        }
        kern.transpose(conv, n, hd, hd, kt + i0, ldk);
        return;
      }
      const auto convert = dt == DType::F16 ? kern.f16_to_f32 : kern.bf16_to_f32;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t src = (at + i * slot_stride) * elem;
        convert(reinterpret_cast<const uint16_t*>(kbase + src), conv + i * hd, hd);
        convert(reinterpret_cast<const uint16_t*>(vbase + src), vb + (i0 + i) * hd, hd);
      }
      kern.transpose(conv, n, hd, hd, kt + i0, ldk);
    };
    for (int64_t c = pc.chunk_begin; c < pc.chunk_end; ++c) {
      const int64_t k0 = c * ldk;
      const int64_t k1 = std::min(pos_hi + 1, k0 + ldk);
      const int64_t nk = k1 - k0;
      for (int64_t key = k0; key < key_lo; ++key) {
        for (int64_t d = 0; d < hd; ++d) kt[d * ldk + key - k0] = 0.0f;
        if (dt != DType::F32)  // an f32 cache's P.V starts at key_lo
          std::fill(vb + (key - k0) * hd, vb + (key - k0 + 1) * hd, 0.0f);
      }
      for (int64_t key = std::max(k0, key_lo); key < k1;) {
        const int64_t n = std::min(k1, (key / bs + 1) * bs) - key;
        load_segment(key, n, key - k0);
        key += n;
      }
      // Scores of the chunk's keys only, in whole vectors of 16 (the
      // columns past nk are zero keys, never read).
      const int64_t ncols = (nk + 15) / 16 * 16;
      if (nk < ncols)
        for (int64_t d = 0; d < hd; ++d) std::fill(kt + d * ldk + nk, kt + d * ldk + ncols, 0.0f);
      kern.attn_scores(qt, rows, hd, kt, ldk, ncols, sc);
      // This chunk's partial: in its slot of `parts` (split items) or in
      // own_part, merged at once.
      float* pacc = split ? parts.data() + (part0 + c) * part_stride : own_part;
      float* pmax = pacc + rows * hd;
      float* psum = pmax + rows;
      for (int64_t j = 0; j < nq; ++j) {
        const int64_t pos = pos_lo + j;
        // Keys [lo, hi) of this chunk are visible to this token.
        const int64_t lo = std::max(k0, win > 0 ? pos - win + 1 : 0), hi = std::min(k1, pos + 1);
        for (int64_t g = 0; g < group; ++g) {
          const int64_t r = j * group + g;
          float* srow = sc + r * ldk;
          if (lo >= hi) {
            std::fill(srow, srow + nk, 0.0f);
            pmax[r] = neg_inf;
            psum[r] = 0.0f;
            continue;
          }
          if (cap > 0)
            for (int64_t i = lo - k0; i < hi - k0; ++i) srow[i] = cap * std::tanh(srow[i] / cap);
          for (int64_t i = 0; i < lo - k0; ++i) srow[i] = neg_inf;
          for (int64_t i = hi - k0; i < nk; ++i) srow[i] = neg_inf;
          const float bmax = kern.attn_max(srow + (lo - k0), hi - lo);
          pmax[r] = bmax;
          psum[r] = kern.attn_exp_sum(srow, nk, bmax);
        }
      }
      std::fill(pacc, pacc + rows * hd, 0.0f);
      if (dt == DType::F32) {
        // Segment by segment in key order, as one call over vb would sum;
        // keys before key_lo (zero weights, zero rows in vb) add nothing.
        for (int64_t key = std::max(k0, key_lo); key < k1;) {
          const int64_t n = std::min(k1, (key / bs + 1) * bs) - key;
          kern.attn_pv(sc + (key - k0), rows, ldk, n,
                       reinterpret_cast<const float*>(vbase) + slot_of(key), slot_stride, hd, pacc);
          key += n;
        }
      } else {
        kern.attn_pv(sc, rows, ldk, nk, vb, hd, hd, pacc);
      }
      if (!split) merge(rows, acc, mx, sum, pacc, pmax, psum);
    }
    if (!split) finish(it, acc, sum);
  };

  pool.parallel_for(nthreads, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf;
    for (int64_t th = b; th < e; ++th)
      for (int i : bins[th]) run_piece(pieces[static_cast<size_t>(i)], buf);
  });
  if (part_slots == 0) return;
  // Split items: their chunks' partials merged in chunk order.
  std::vector<int> split_items;
  for (size_t i = 0; i < items.size(); ++i)
    if (part_offset[i] >= 0) split_items.push_back(static_cast<int>(i));
  pool.parallel_for(static_cast<int64_t>(split_items.size()), [&](int64_t b, int64_t e) {
    thread_local std::vector<float> state;
    for (int64_t x = b; x < e; ++x) {
      const WorkItem& it = items[static_cast<size_t>(split_items[static_cast<size_t>(x)])];
      const int64_t rows = (it.tok_end - it.tok_begin) * group;
      state.assign(static_cast<size_t>(rows * hd + 2 * rows), 0.0f);
      float* acc = state.data();
      float* mx = acc + rows * hd;
      float* sum = mx + rows;
      std::fill(mx, mx + rows, neg_inf);
      const auto [c0, c1] = chunk_range(it);
      const float* slot0 =
          parts.data() +
          part_offset[static_cast<size_t>(split_items[static_cast<size_t>(x)])] * part_stride;
      for (int64_t c = c0; c < c1; ++c) {
        const float* pacc = slot0 + (c - c0) * part_stride;
        merge(rows, acc, mx, sum, pacc, pacc + rows * hd, pacc + rows * hd + rows);
      }
      finish(it, acc, sum);
    }
  });
}

}  // namespace loom::cpu
