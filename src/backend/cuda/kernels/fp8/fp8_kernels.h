// Launchers of the FP8 E4M3 kernels (W8A8 linear layers), callable from host
// C++: activation and weight quantisation (quantize.cu) and the tensor-core
// FP8 matmul for few rows (fp8_matmul.cu). Quantisation reproduces the host
// references of backend/linear.h bit for bit: scale = max(amax, 1e-12) / 448,
// q = fp8(x * (1 / scale)), round to nearest even, saturating. Callers
// (fp8_gemm.cpp) check shapes and alignment; these check nothing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace loom::cuda {

enum class Fp8ActMode : int32_t {
  Token = 0,   // one scale per row: its amax
  Group = 1,   // one per row and 128 columns
  Static = 2,  // the layer's input scale (*static_scale) for every row
};

// x bf16 [rows, k] -> q fp8 [padded_rows, k] and scales: Token and Static
// write scale[row] (Static: *static_scale); Group writes scale[g * scale_ld +
// row] for each 128-column group g (the "outer-dimension-major" layout
// cuBLASLt's 1x128 block scaling reads). Rows in [rows, padded_rows) get zero
// values and the scale of an all-zero row. k a multiple of 8, x 16-byte aligned.
void quantize_fp8_rows(const void* x, int64_t rows, int64_t padded_rows, int64_t k, Fp8ActMode mode,
                       const float* static_scale, uint8_t* q, float* scale, int64_t scale_ld,
                       cudaStream_t stream);

// The per-row scales of an FP8 product computed without them (cuBLASLt's
// FP8 GEMM with unit scales where it has no outer-vector scaling), rounded
// once: out[r, c] = bf16(fma(row_scale[r] * col_scale[c], in[r, c], bias[c] or +0)),
// f32 in [rows, cols], bf16 out [rows, cols], bias bf16 [cols] or null.
void scale_fp8_product(const float* in, void* out, int64_t rows, int64_t cols,
                       const float* row_scale, const float* col_scale, const void* bias,
                       cudaStream_t stream);

// A plain f32/f16/bf16 weight [n, k] quantised per output row (--quantization
// fp8): scale[r] = fp8_scale_for_amax(max |w[r, :]|), q = fp8(w * (1 / scale[r])).
void quantize_fp8_weight_rows(DType type, const void* w, int64_t n, int64_t k, uint8_t* q,
                              float* scale, cudaStream_t stream);

// Partial maxima of |x| for the Token mode of fp8_matmul: partial[row *
// parts + p] over columns [p * 2048, (p + 1) * 2048) of row `row`, parts =
// fp8_row_amax_parts(k). k a multiple of 8, x 16-byte aligned.
int32_t fp8_row_amax_parts(int64_t k);
void fp8_row_amax(const void* x, int64_t m, int64_t k, float* partial, cudaStream_t stream);

// FP8 matmul on tensor cores (mma m16n8k32 e4m3, f32 accumulation promoted
// to f32 registers every 128 columns) with x quantised on the fly, exactly as
// quantize_fp8_rows quantises it: out[m, n] = sum_k fp8(x)[m, k] wq[n, k] *
// x_scale * w_scale (+ bias[n]), bf16 out. Token and Static modes: weights
// scaled per row (w_scale[n]), x per row (Token: from row_amax's partial
// maxima; Static: *static_scale). Group mode: weights per 128x128 block
// (w_scale[(n / 128) * w_scale_ld + k / 128]), x per 128-column group. Each
// 16 weight rows x 8 rows of x is one CUDA block whose warps split k, so a
// row's result does not depend on the others. Streams the weights once per 8
// rows of x: the kernel for decode steps (m <= kFp8MatmulMaxRows); any m works
// (the fallback where cuBLASLt has no FP8 algorithm). k a multiple of 16; x
// and w 16-byte aligned. Token mode with row_amax null: every block reduces
// its rows' maxima itself (meant for m <= kFp8InBlockAmaxRows; the scales,
// and so the results, are the same bit for bit either way).
constexpr int64_t kFp8MatmulMaxRows = 8;
constexpr int64_t kFp8InBlockAmaxRows = 2;
struct Fp8MatmulArgs {
  const void* x = nullptr;  // bf16 [m, k]
  int64_t m = 0;
  Fp8ActMode mode = Fp8ActMode::Token;
  const float* row_amax = nullptr;  // Token: [m, amax_parts]
  int32_t amax_parts = 0;
  const float* static_scale = nullptr;  // Static
  const uint8_t* w = nullptr;           // [n, k]
  const float* w_scale = nullptr;
  int64_t w_scale_ld = 0;  // Group: block scale row stride
  int64_t n = 0;
  int64_t k = 0;
  const void* bias = nullptr;  // bf16 [n] or null
  void* out = nullptr;         // bf16 [m, n]
};
void fp8_matmul(const Fp8MatmulArgs& args, cudaStream_t stream);

// The same product for one or two rows of x (Token mode computes the rows'
// maxima itself: row_amax is not read) from persistent blocks, one per SM
// (sms), whose weight stream runs through a ring of shared-memory stages
// filled by bulk copies (sm_90; fp8_stream.cu). Supported: 1 <= m <= 2, k a
// multiple of 16 and small enough for x's rows to sit in shared memory
// beside four stages (a multiple of the 4 consumer warps).
// cfg: the bytes of k per stage and row (a multiple of 128, at most 4096)
// and the blocks per SM (1-4, sharing the SM's shared memory).
struct Fp8StreamConfig {
  int chunk = 1024;
  int blocks_per_sm = 1;
};
bool fp8_stream_matmul_supported(int64_t m, int64_t k, const Fp8StreamConfig& cfg);
void fp8_stream_matmul(const Fp8MatmulArgs& args, int sms, const Fp8StreamConfig& cfg,
                       cudaStream_t stream);

}  // namespace loom::cuda
