// matmul: out[M, N] = x[M, K] . w[N, K]^T (+ bias). Float weights multiply the
// f32 activations directly; quantised weights multiply activations quantised
// once per call to 8-bit blocks (Q8_0 for Q8_0/Q4_0/Q5_0, Q8_1 with block sums
// for Q4_1/Q5_1, Q8_K for K-quants) with integer dot products, as llama.cpp does. Threads split the output columns in
// tiles of kColTile; within a tile each weight row is read from memory once and
// reused for every activation row.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/kernels.h"
#include "core/error.h"

namespace loom::cpu {
namespace {

constexpr int64_t kColTile = 16;  // output columns per work item (64 bytes of f32 per row)

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
      m, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) quant(xs + r * k, reinterpret_cast<Block*>(dst + r * rb), k);
      },
      std::max<int64_t>(1, 65536 / std::max<int64_t>(k, 1)));
  act.data = act.storage.data();
}

// Adapters from the typed kernel table to one signature (k = elements per row).
template <auto Member, class W, class X, int64_t kBlock>
float row_dot(const CpuKernels& kern, const void* w, const void* x, int64_t k) {
  return (kern.*Member)(static_cast<const W*>(w), static_cast<const X*>(x), k / kBlock);
}

}  // namespace

void matmul(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& out) {
  LOOM_CHECK(w.ndim() == 2, "matmul weight must be 2-D [N, K], got {}", shape_str(w.shape()));
  const int64_t n = w.dim(0), k = w.dim(1), m = x.rows();
  LOOM_CHECK(x.dtype() == DType::F32 && out.dtype() == DType::F32, "matmul activations must be f32");
  LOOM_CHECK(x.cols() == k, "matmul x {} does not match weight {}", shape_str(x.shape()),
             shape_str(w.shape()));
  LOOM_CHECK(out.rows() == m && out.cols() == n, "matmul out {} must be [{}, {}]",
             shape_str(out.shape()), m, n);
  if (bias)
    LOOM_CHECK(bias->dtype() == DType::F32 && bias->numel() == n, "matmul bias must be f32 [{}]", n);
  LOOM_CHECK(x.data() != out.data(), "matmul cannot run in place");
  if (m == 0 || n == 0) return;

  const CpuKernels& kern = kernels_for(active_isa());
  Activations act;
  float (*dot)(const CpuKernels&, const void*, const void*, int64_t) = nullptr;
  switch (w.dtype()) {
    case DType::F32:
      dot = row_dot<&CpuKernels::dot_f32, float, float, 1>;
      break;
    case DType::F16:
      dot = row_dot<&CpuKernels::dot_f16, uint16_t, float, 1>;
      break;
    case DType::BF16:
      dot = row_dot<&CpuKernels::dot_bf16, uint16_t, float, 1>;
      break;
    case DType::Q8_0:
      dot = row_dot<&CpuKernels::dot_q8_0, BlockQ8_0, ActQ8_0, kQK>;
      break;
    case DType::Q4_0:
      dot = row_dot<&CpuKernels::dot_q4_0, BlockQ4_0, ActQ8_0, kQK>;
      break;
    case DType::Q4_1:
      dot = row_dot<&CpuKernels::dot_q4_1, BlockQ4_1, ActQ8_1, kQK>;
      break;
    case DType::Q5_0:
      dot = row_dot<&CpuKernels::dot_q5_0, BlockQ5_0, ActQ8_0, kQK>;
      break;
    case DType::Q5_1:
      dot = row_dot<&CpuKernels::dot_q5_1, BlockQ5_1, ActQ8_1, kQK>;
      break;
    case DType::Q4_K:
      dot = row_dot<&CpuKernels::dot_q4_k, BlockQ4_K, ActQ8_K, kQKK>;
      break;
    case DType::Q5_K:
      dot = row_dot<&CpuKernels::dot_q5_k, BlockQ5_K, ActQ8_K, kQKK>;
      break;
    case DType::Q6_K:
      dot = row_dot<&CpuKernels::dot_q6_k, BlockQ6_K, ActQ8_K, kQKK>;
      break;
    default:
      LOOM_THROW("matmul does not support {} weights", dtype_name(w.dtype()));
  }
  switch (w.dtype()) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0:
      quantize_rows<ActQ8_0>(pool, x, m, k, kQK, kern.quantize_q8_0, act);
      break;
    case DType::Q4_1:
    case DType::Q5_1:
      quantize_rows<ActQ8_1>(pool, x, m, k, kQK, kern.quantize_q8_1, act);
      break;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      quantize_rows<ActQ8_K>(pool, x, m, k, kQKK, kern.quantize_q8_k, act);
      break;
    default:
      act.data = x.data();
      act.row_bytes = k * 4;
  }

  const auto* wdata = static_cast<const uint8_t*>(w.data());
  const int64_t w_row_bytes = w.row_stride_bytes();
  const auto* xdata = static_cast<const uint8_t*>(act.data);
  const int64_t x_row_bytes = act.row_bytes;
  const float* b = bias ? bias->data_as<const float>() : nullptr;
  float* o = out.data_as<float>();
  const int64_t tiles = (n + kColTile - 1) / kColTile;
  pool.parallel_for(tiles, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t c0 = t * kColTile, c1 = std::min(n, c0 + kColTile);
      for (int64_t r = 0; r < m; ++r) {
        const uint8_t* xr = xdata + r * x_row_bytes;
        float* orow = o + r * n;
        for (int64_t c = c0; c < c1; ++c)
          orow[c] = dot(kern, wdata + c * w_row_bytes, xr, k) + (b ? b[c] : 0.0f);
      }
    }
  });
}

}  // namespace loom::cpu
