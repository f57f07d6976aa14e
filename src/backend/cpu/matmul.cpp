// matmul: out[M, N] = x[M, K] . w[N, K]^T (+ bias). Two paths:
//  * few rows (decode, M < kGemmMinRows): row dot products straight from the
//    weights as stored. Quantised weights multiply activations quantised once
//    per call to 8-bit blocks (Q8_1-like blocks of 32 with their sums for the
//    32-value types, Q8_K-like blocks of 256 for K-quants) with integer dot
//    products, as llama.cpp does. Threads split the output columns in tiles of
//    kColTile; each weight row is read once and unpacked once per kRows rows.
//  * more rows (prefill, batched decode): the cache-blocked GEMM of gemm.h.
//    Work items are (panel of nr columns, block of rows); each unpacks its
//    panel once per kc values of K and runs every row of its block over it.
//    Items own whole panels of the output, so threads never share a line.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels.h"
#include "core/error.h"

namespace loom::cpu {
namespace {

constexpr int64_t kColTile = 16;          // output columns per work item (64 bytes of f32 per row)
constexpr int64_t kPrefetchBytes = 4096;  // software prefetch distance into the weights
constexpr int64_t kRows = 4;  // activation rows per pass over a weight row (kernels take 1..4)
// From this many rows on, unpacking each weight panel once and reusing it for
// every row beats unpacking every weight block in registers once per kRows rows.
constexpr int64_t kGemmMinRows = 4;

// The activations in the form the weight type's dot product wants.
struct Activations {
  const void* data = nullptr;
  int64_t row_bytes = 0;
  std::vector<uint8_t> storage;
};

template <class Block>
void quantize_rows(ThreadPool& pool, const Tensor& x, int64_t m, int64_t k, int64_t elems_per_block,
                   void (*quant)(const float*, Block*, int64_t), Activations& act) {
  act.row_bytes = static_cast<int64_t>(sizeof(Block)) * (k / elems_per_block);
  act.storage.resize(static_cast<size_t>(act.row_bytes * m));
  const float* xs = x.data_as<const float>();
  auto* dst = act.storage.data();
  const int64_t rb = act.row_bytes;
  pool.parallel_for(
      m,
      [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r)
          quant(xs + r * k, reinterpret_cast<Block*>(dst + r * rb), k);
      },
      std::max<int64_t>(1, 65536 / std::max<int64_t>(k, 1)));
  act.data = act.storage.data();
}

// One weight row against nx (1..4) activation rows: y[r * ys] = w . x_r, with x
// rows xs bytes apart; k is the row length in elements.
using RowsDot = void (*)(const CpuKernels&, const uint8_t* w, const uint8_t* x, int64_t xs, int nx,
                         float* y, int64_t ys, int64_t k);

// Adapters from the typed kernel table to RowsDot.
template <auto Member, class W, class X, int64_t kBlock>
void quant_rows(const CpuKernels& kern, const uint8_t* w, const uint8_t* x, int64_t xs, int nx,
                float* y, int64_t ys, int64_t k) {
  (kern.*Member)(reinterpret_cast<const W*>(w), k / kBlock, reinterpret_cast<const X*>(x),
                 xs / static_cast<int64_t>(sizeof(X)), nx, y, ys);
}
template <auto Member, class W>
void float_rows(const CpuKernels& kern, const uint8_t* w, const uint8_t* x, int64_t xs, int nx,
                float* y, int64_t ys, int64_t k) {
  for (int r = 0; r < nx; ++r)
    y[r * ys] = (kern.*Member)(reinterpret_cast<const W*>(w),
                               reinterpret_cast<const float*>(x + r * xs), k);
}

}  // namespace

void matmul(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  LOOM_CHECK(w.ndim() == 2, "matmul weight must be 2-D [N, K], got {}", shape_str(w.shape()));
  const int64_t n = w.dim(0), k = w.dim(1), m = x.rows();
  LOOM_CHECK(x.dtype() == DType::F32 && out.dtype() == DType::F32,
             "matmul activations must be f32");
  LOOM_CHECK(x.cols() == k, "matmul x {} does not match weight {}", shape_str(x.shape()),
             shape_str(w.shape()));
  LOOM_CHECK(out.rows() == m && out.cols() == n, "matmul out {} must be [{}, {}]",
             shape_str(out.shape()), m, n);
  if (bias)
    LOOM_CHECK(bias->dtype() == DType::F32 && bias->numel() == n, "matmul bias must be f32 [{}]",
               n);
  LOOM_CHECK(x.data() != out.data(), "matmul cannot run in place");
  if (m == 0 || n == 0) return;
  // Float weights always take the GEMM: each output is then one FMA chain over
  // K whatever M is, so a row's result does not depend on the rows batched with
  // it (seeded sampling gives the same tokens alone and in a batch).
  const bool float_weight = !is_quantized(w.dtype());
  if ((m >= kGemmMinRows || float_weight) && gemm_supports(w.dtype())) {
    gemm_matmul(pool, x, w, bias ? bias->data_as<const float>() : nullptr, out);
    return;
  }

  const CpuKernels& kern = kernels_for(active_isa());
  RowsDot dot = nullptr;
  switch (w.dtype()) {
    case DType::F32:
      dot = float_rows<&CpuKernels::dot_f32, float>;
      break;
    case DType::F16:
      dot = float_rows<&CpuKernels::dot_f16, uint16_t>;
      break;
    case DType::BF16:
      dot = float_rows<&CpuKernels::dot_bf16, uint16_t>;
      break;
    case DType::Q8_0:
      dot = quant_rows<&CpuKernels::mdot_q8_0, BlockQ8_0, ActQ8_1, kQK>;
      break;
    case DType::Q4_0:
      dot = quant_rows<&CpuKernels::mdot_q4_0, BlockQ4_0, ActQ8_1, kQK>;
      break;
    case DType::Q4_1:
      dot = quant_rows<&CpuKernels::mdot_q4_1, BlockQ4_1, ActQ8_1, kQK>;
      break;
    case DType::Q5_0:
      dot = quant_rows<&CpuKernels::mdot_q5_0, BlockQ5_0, ActQ8_1, kQK>;
      break;
    case DType::Q5_1:
      dot = quant_rows<&CpuKernels::mdot_q5_1, BlockQ5_1, ActQ8_1, kQK>;
      break;
    case DType::Q4_K:
      dot = quant_rows<&CpuKernels::mdot_q4_k, BlockQ4_K, ActQ8_K, kQKK>;
      break;
    case DType::Q5_K:
      dot = quant_rows<&CpuKernels::mdot_q5_k, BlockQ5_K, ActQ8_K, kQKK>;
      break;
    case DType::Q6_K:
      dot = quant_rows<&CpuKernels::mdot_q6_k, BlockQ6_K, ActQ8_K, kQKK>;
      break;
    default:
      LOOM_THROW("matmul does not support {} weights", dtype_name(w.dtype()));
  }
  Activations act;
  switch (w.dtype()) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
      act.data = x.data();
      act.row_bytes = k * 4;
      break;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      quantize_rows<ActQ8_K>(pool, x, m, k, kQKK, kern.quantize_q8_k, act);
      break;
    default:
      quantize_rows<ActQ8_1>(pool, x, m, k, kQK, kern.quantize_q8_1, act);
  }

  const auto* wdata = static_cast<const uint8_t*>(w.data());
  const int64_t w_row_bytes = w.row_stride_bytes();
  const auto* xdata = static_cast<const uint8_t*>(act.data);
  const int64_t x_row_bytes = act.row_bytes;
  const float* b = bias ? bias->data_as<const float>() : nullptr;
  float* o = out.data_as<float>();
  // Float weights gain nothing from sharing a weight row (no unpacking), and
  // four f32 activation rows would crowd L1: one row per pass for them.
  const int64_t rows_per_pass = is_quantized(w.dtype()) ? kRows : 1;
  const int64_t tiles = (n + kColTile - 1) / kColTile;
  pool.parallel_for(tiles, [&](int64_t t0, int64_t t1) {
    const int64_t chunk_end = std::min(n, t1 * kColTile);
    // On the first pass the weights come from memory: prefetch about kPrefetchBytes
    // ahead (whole rows), which the hardware prefetcher alone does not keep up
    // with for short rows. Rows longer than that stream well on their own.
    const bool prefetch = w_row_bytes <= kPrefetchBytes;
    const int64_t ahead = std::max<int64_t>(1, kPrefetchBytes / std::max<int64_t>(1, w_row_bytes));
    for (int64_t t = t0; t < t1; ++t) {
      // One tile's weight rows stay in cache while every group of activation
      // rows passes over them.
      const int64_t c0 = t * kColTile, c1 = std::min(n, c0 + kColTile);
      for (int64_t r = 0; r < m; r += rows_per_pass) {
        const int nx = static_cast<int>(std::min<int64_t>(rows_per_pass, m - r));
        for (int64_t c = c0; c < c1; ++c) {
          if (prefetch && r == 0 && c + ahead < chunk_end) {
            const uint8_t* p = wdata + (c + ahead) * w_row_bytes;
            for (int64_t l = 0; l < w_row_bytes; l += 64) __builtin_prefetch(p + l);
          }
          dot(kern, wdata + c * w_row_bytes, xdata + r * x_row_bytes, x_row_bytes, nx,
              o + r * n + c, n, k);
        }
      }
      if (b)
        for (int64_t r = 0; r < m; ++r)
          for (int64_t c = c0; c < c1; ++c) o[r * n + c] += b[c];
    }
  });
}

}  // namespace loom::cpu
