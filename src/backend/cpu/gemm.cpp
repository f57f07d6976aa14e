// The GEMM driver: activation quantisation once per call, work items of
// (panel of nr output columns, block of rows), K in chunks of at most
// kGemmKcQuant values so a panel stays in L1/L2 while every row of the block
// passes over it. Below kGemmMinRowsQuant rows (AVX2: kGemmMinRowsQuantAvx2;
// float weights: kGemmMinRowsFloat), the row path: work items of
// kColTile output columns, eight weight rows per kernel call.
#include "backend/cpu/gemm.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/quant/interleave.h"
#include "core/error.h"

namespace loom::cpu {
namespace {

constexpr int64_t kMinRowBlock = 16;  // rows per item when rows are split over threads
constexpr int64_t kColTile = 16;      // row path: output columns per work item
constexpr int64_t kRowGroup = 8;  // row path: weight rows per kernel call (interleaved: a group)
static_assert(kColTile % quant::kInterleaveRows == 0, "a tile holds whole interleaved groups");
// Row path: the next group's weight rows are prefetched while one computes
// when they are this short (longer rows stream well on their own).
constexpr int64_t kPrefetchGroupBytes = 16384;

// Per-thread panel buffers, grown on demand and reused across calls.
struct PanelBuffers {
  std::vector<uint8_t> q;
  std::vector<float> scale, bias, f;
};

PanelBuffers& thread_buffers() {
  thread_local PanelBuffers b;
  return b;
}

struct Split {
  int64_t tiles, row_blocks, rows_per_block;
};

// Enough items for every thread to get a few; rows are split only when the
// panels alone do not give that (narrow outputs).
Split split_work(int64_t m, int64_t n, int nr, int threads) {
  Split s{(n + nr - 1) / nr, 1, m};
  const int64_t want = 4 * static_cast<int64_t>(threads);
  if (threads > 1 && s.tiles < want) {
    s.row_blocks = std::min((want + s.tiles - 1) / s.tiles, std::max<int64_t>(1, m / kMinRowBlock));
    s.rows_per_block = (m + s.row_blocks - 1) / s.row_blocks;
    s.rows_per_block = (s.rows_per_block + 3) / 4 * 4;  // whole micro-kernel row groups
    s.row_blocks = (m + s.rows_per_block - 1) / s.rows_per_block;
  }
  return s;
}

int64_t unit_of(DType t) {
  return dtype_info(t).block_elems;
}

// The activations as the kernels take them: 8-bit blocks of 32 for quantised
// weights (the same for every M, so the row path and the GEMM see the same
// blocks), none for float weights.
std::vector<ActQ8_G> quantize_activations(ThreadPool& pool, const GemmKernels& gk, const Tensor& x,
                                          bool quant) {
  std::vector<ActQ8_G> act;
  if (!quant) return act;
  const int64_t m = x.rows(), k = x.cols(), xs = k / kQK;
  const float* xf = x.data_as<const float>();
  act.resize(static_cast<size_t>(m * xs));
  pool.parallel_for(
      m,
      [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) gk.quantize(xf + r * k, act.data() + r * xs, k);
      },
      std::max<int64_t>(1, 16384 / k));
  return act;
}

// The row path for m rows below the GEMM's (gk has rows_quant / rows_float),
// for one or several weights of the same K (x quantised once by the caller):
// the weights' column tiles, numbered one after another, in one parallel pass.
void row_matmul(ThreadPool& pool, const GemmKernels& gk, const Tensor& x,
                const std::vector<GemmJob>& jobs, const std::vector<ActQ8_G>& act) {
  const int64_t k = x.cols(), m = x.rows(), xs = k / kQK;
  const float* xf = x.data_as<const float>();
  std::vector<int64_t> first(jobs.size() + 1, 0);  // each job's first tile
  for (size_t j = 0; j < jobs.size(); ++j)
    first[j + 1] = first[j] + (jobs[j].w->dim(0) + kColTile - 1) / kColTile;
  // Tiles [t0, t1) of one job.
  auto run_tiles = [&](const GemmJob& job, int64_t t0, int64_t t1) {
    const Tensor& w = *job.w;
    const int64_t n = w.dim(0);
    const DType wt = w.dtype();
    QuantLayout layout;
    const bool quant = gk.quant_layout(wt, layout);
    const auto* wdata = static_cast<const uint8_t*>(w.data());
    const int64_t row_bytes = w.row_stride_bytes();
    const bool prefetch = kRowGroup * row_bytes <= kPrefetchGroupBytes;
    const int64_t step = std::max(kRowGroup, dtype_info(wt).row_group);
    float* o = job.out->data_as<float>();
    const int64_t end = std::min(n, t1 * kColTile);
    for (int64_t c0 = t0 * kColTile; c0 < end; c0 += step) {
      const int rows = static_cast<int>(std::min<int64_t>(step, n - c0));
      const uint8_t* wg = wdata + c0 * row_bytes;
      // Up to kRowKernelRows activation rows per call; the group's weights
      // stay in L1 for the next rows.
      if (quant) {
        // A whole next call's rows to prefetch, past the end of this item too:
        // the thread pool hands a thread its items in order, so the rows
        // after this item are usually this thread's next ones.
        const uint8_t* next = c0 + 2 * step <= n ? wg + step * row_bytes : nullptr;
        for (int64_t r0 = 0; r0 < m; r0 += kRowKernelRowsQuant)
          gk.rows_quant(wt, wg, row_bytes, rows, k, act.data() + r0 * xs, xs,
                        static_cast<int>(std::min(kRowKernelRowsQuant, m - r0)), o + r0 * n + c0, n,
                        r0 == 0 ? next : nullptr);
      } else {
        if (prefetch && c0 + kRowGroup < end) {
          const uint8_t* next = wg + kRowGroup * row_bytes;
          const int64_t bytes = std::min<int64_t>(kRowGroup, end - c0 - kRowGroup) * row_bytes;
          for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(next + b);
        }
        for (int64_t r0 = 0; r0 < m; r0 += kRowKernelRows)
          gk.rows_float(wt, wg, row_bytes, rows, k, xf + r0 * k, k,
                        static_cast<int>(std::min(kRowKernelRows, m - r0)), o + r0 * n + c0, n);
      }
      if (job.bias)
        for (int64_t r = 0; r < m; ++r)
          for (int j = 0; j < rows; ++j) o[r * n + c0 + j] += job.bias[c0 + j];
    }
  };
  pool.parallel_for(first.back(), [&](int64_t t0, int64_t t1) {
    size_t j =
        static_cast<size_t>(std::upper_bound(first.begin(), first.end(), t0) - first.begin()) - 1;
    for (; j < jobs.size() && first[j] < t1; ++j)
      run_tiles(jobs[j], std::max(t0, first[j]) - first[j], std::min(t1, first[j + 1]) - first[j]);
  });
}

// Whether m rows against w take the row path (below kGemmMinRowsQuant rows
// for quantised weights, kGemmMinRowsQuantAvx2 / ...Signed under AVX2,
// kGemmMinRowsFloat for float ones).
bool row_path(const GemmKernels& gk, int64_t m, const Tensor& w) {
  QuantLayout layout;
  if (!gk.rows_quant) return false;
  if (!gk.quant_layout(w.dtype(), layout)) return m < kGemmMinRowsFloat;
  if (gk.isa != Isa::Avx2) return m < kGemmMinRowsQuant;
  return m < (layout.is_signed ? kGemmMinRowsQuantAvx2Signed : kGemmMinRowsQuantAvx2);
}

// Checks a weight for the GEMM and the row path; whether it is quantised
// (then with its layout).
bool check_weight(const GemmKernels& gk, const Tensor& w, int64_t k, QuantLayout& layout) {
  const DType wt = w.dtype();
  const bool quant = gk.quant_layout(wt, layout);
  LOOM_CHECK(quant || wt == DType::F32 || wt == DType::F16 || wt == DType::BF16,
             "gemm does not support {}", dtype_name(wt));
  const int64_t unit = quant ? std::max<int64_t>(32, unit_of(wt)) : 1;
  LOOM_CHECK(k % unit == 0, "gemm: K {} is not a whole number of {} blocks", k, dtype_name(wt));
  return quant;
}

}  // namespace

bool gemm_supports(DType w) {
  QuantLayout l;
  return w == DType::F32 || w == DType::F16 || w == DType::BF16 ||
         gemm_kernels_for(active_isa()).quant_layout(w, l);
}

void gemm_matmul_many(ThreadPool& pool, const Tensor& x, const std::vector<GemmJob>& jobs) {
  const GemmKernels& gk = gemm_kernels_for(active_isa());
  if (!std::all_of(jobs.begin(), jobs.end(),
                   [&](const GemmJob& j) { return row_path(gk, x.rows(), *j.w); })) {
    for (const GemmJob& j : jobs) gemm_matmul(pool, x, *j.w, j.bias, *j.out);
    return;
  }
  bool any_quant = false;
  QuantLayout layout;
  for (const GemmJob& j : jobs) any_quant = check_weight(gk, *j.w, x.cols(), layout) || any_quant;
  row_matmul(pool, gk, x, jobs, quantize_activations(pool, gk, x, any_quant));
}

void gemm_matmul(ThreadPool& pool, const Tensor& x, const Tensor& w, const float* bias,
                 Tensor& out) {
  const GemmKernels& gk = gemm_kernels_for(active_isa());
  const int64_t n = w.dim(0), k = w.dim(1), m = x.rows();
  const int nr = gk.nr;
  const DType wt = w.dtype();
  if (row_path(gk, m, w)) {
    gemm_matmul_many(pool, x, {GemmJob{&w, bias, &out}});
    return;
  }
  QuantLayout layout;
  const bool quant = check_weight(gk, w, k, layout);
  const int64_t kc_max = quant ? kGemmKcQuant : kGemmKcFloat;
  const std::vector<ActQ8_G> act = quantize_activations(pool, gk, x, quant);

  const int64_t xs = k / kQK;
  const float* xf = x.data_as<const float>();

  const auto* wdata = static_cast<const uint8_t*>(w.data());
  const int64_t row_bytes = w.row_stride_bytes();
  float* o = out.data_as<float>();
  const Split split = split_work(m, n, nr, pool.num_threads());
  pool.parallel_for(split.tiles * split.row_blocks, [&](int64_t i0, int64_t i1) {
    PanelBuffers& buf = thread_buffers();
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t tile = item / split.row_blocks, rb = item % split.row_blocks;
      const int64_t c0 = tile * nr, r0 = rb * split.rows_per_block;
      const int cols = static_cast<int>(std::min<int64_t>(nr, n - c0));
      const int64_t rows = std::min(split.rows_per_block, m - r0);
      if (rows <= 0) continue;
      const uint8_t* wtile = wdata + c0 * row_bytes;
      float* c = o + r0 * n + c0;
      // The next panel's weights are fetched while this one computes: a large
      // weight (an output head) comes from DRAM, and the hardware prefetcher
      // does not run ahead across rows.
      const int64_t next_c0 = c0 + nr;
      const bool prefetch_next = rb + 1 == split.row_blocks && next_c0 < n;
      const int next_rows = static_cast<int>(std::min<int64_t>(nr, n - next_c0));
      for (int64_t k0 = 0; k0 < k; k0 += kc_max) {
        const int64_t kc = std::min(kc_max, k - k0);
        if (prefetch_next) {
          // Bytes [lo, hi) of each row; an interleaved group keeps them for its
          // rows together, at [lo, hi) times the group's rows.
          const int64_t group = dtype_info(wt).row_group;
          const int64_t lo = k0 / unit_of(wt) * dtype_info(wt).block_bytes * group;
          const int64_t hi = (k0 + kc) / unit_of(wt) * dtype_info(wt).block_bytes * group;
          for (int64_t r = 0; r < next_rows; r += group)
            for (int64_t b = lo; b < hi; b += 64)
              __builtin_prefetch(wdata + (next_c0 + r) * row_bytes + b);
        }
        if (quant) {
          buf.q.resize(static_cast<size_t>(nr * kc));
          buf.scale.resize(static_cast<size_t>(nr * kc / 16));
          buf.bias.resize(static_cast<size_t>(nr * kc / 16));
          QuantPanel p{layout, nr, kc, buf.q.data(), buf.scale.data(), buf.bias.data()};
          gk.pack_quant(wt, wtile, row_bytes, cols, k0, kc, p);
          gk.gemm_quant(p, act.data() + r0 * xs + k0 / kQK, xs, rows, c, n, cols, k0 > 0);
        } else {
          buf.f.resize(static_cast<size_t>(nr * kc));
          gk.pack_float(wt, wtile, row_bytes, cols, k0, kc, buf.f.data());
          gk.gemm_float(buf.f.data(), kc, xf + r0 * k + k0, k, rows, c, n, cols, k0 > 0);
        }
      }
      if (bias)
        for (int64_t r = 0; r < rows; ++r)
          for (int j = 0; j < cols; ++j) c[r * n + j] += bias[c0 + j];
    }
  });
}

RowPrefetch parse_row_prefetch(const char* value, RowPrefetch base) {
  if (!value || !*value) return base;
  const std::string v(value);
  const size_t comma = v.find(',');
  const std::string num = v.substr(0, comma);
  const std::string where = comma == std::string::npos ? "" : v.substr(comma + 1);
  char* end = nullptr;
  const long long bytes = std::strtoll(num.c_str(), &end, 10);
  LOOM_CHECK(!num.empty() && end && *end == '\0' && bytes >= 0 && bytes <= (1 << 20) &&
                 (comma == std::string::npos || where == "l1" || where == "l2"),
             "LOOM_CPU_ROW_PREFETCH={} must be BYTES (0 to 1048576), optionally ,l1 or ,l2", v);
  base.bytes = bytes;
  if (comma != std::string::npos) base.l2 = where == "l2";
  return base;
}

const RowPrefetch& row_prefetch() {
  static const RowPrefetch p = [] {
    RowPrefetch r;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_is("intel")) r = RowPrefetch{24576, true};
#endif
    return parse_row_prefetch(std::getenv("LOOM_CPU_ROW_PREFETCH"), r);
  }();
  return p;
}

}  // namespace loom::cpu
