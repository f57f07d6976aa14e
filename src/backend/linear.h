// LinearWeight: a linear layer's weight as the backends take it: a plain
// matrix [N, K] (any dtype the backend's matmul accepts), or FP8 E4M3 values
// [N, K] with dequantising scales (w = fp8 * scale) and the scheme by which
// the layer's input activations are quantised (W8A8). Also the host
// references of FP8 (de)quantisation that backends and tests share: the GPU
// kernels reproduce them bit for bit (same float operations, core/fp8.h
// rounding). Pure functions, any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace loom {

enum class Fp8WeightScale {
  Tensor,   // one scale per matrix: scale f32 [1]
  Channel,  // one per output row: scale f32 [N]
  Block,  // one per block_n x block_k tile: scale f32 [ceil(N / bn), scale_ld], scale_ld >= ceil(K
          // / bk)
};

enum class Fp8Activation {
  DynamicToken,  // at run time, one scale per row of x: fp8_scale_for_amax(max |x row|)
  DynamicGroup,  // at run time, one per row and group of block_k columns (the last may be shorter)
  Static,        // one scale for every row: input_scale
};

struct LinearWeight {
  Tensor weight;  // [N, K]: plain, or F8_E4M3 (then the fields below apply)
  Fp8WeightScale scale_kind = Fp8WeightScale::Channel;
  Tensor scale;           // f32, see Fp8WeightScale (on the weight's device once prepared)
  int64_t block_n = 128;  // Block only
  int64_t block_k = 128;
  int64_t scale_ld = 0;  // Block: scale elements per block row (0: ceil(K / block_k))
  Fp8Activation activation = Fp8Activation::DynamicToken;
  Tensor input_scale;  // Static: f32 [1]
  // Set on a plain bf16/f16/f32 host weight: the backend quantises it at
  // prepare time to FP8 with per-channel scales and dynamic per-token
  // activations (--quantization fp8).
  bool quantize = false;

  bool fp8() const { return weight.dtype() == DType::F8_E4M3; }
  int64_t rows() const { return weight.dim(0); }
  int64_t cols() const { return weight.dim(1); }
  // Blocks of block_k columns (Block scales) or activation groups (DynamicGroup).
  int64_t k_blocks() const { return (cols() + block_k - 1) / block_k; }
  int64_t scale_row_stride() const { return scale_ld > 0 ? scale_ld : k_blocks(); }
};

// Throws loom::Error unless `w` (host or device) is a consistent FP8 linear
// weight: a 2-D F8_E4M3 weight, f32 scales of the shape its kind needs, a
// positive finite input scale when static, block shapes of 128 x 128.
void check_fp8_linear(const LinearWeight& w, const char* name);

// --- host references (tensors in CPU memory) ---

// The dequantising scale of weight element (n, k).
float fp8_weight_scale(const LinearWeight& w, int64_t n, int64_t k);

// dequant(w) as an f32 [N, K] host tensor: fp8 value * its scale (exact in f32).
Tensor dequantize_fp8_linear(const LinearWeight& w);

// A plain f32/f16/bf16 host matrix quantised per output row: scale[n] =
// fp8_scale_for_amax(max |w[n, :]|), q = fp8(w * (1 / scale[n])); dynamic
// per-token activations. What --quantization fp8 does at load.
LinearWeight quantize_fp8_per_channel(const Tensor& w);

// x [m, k] (f32 values) quantised as `w` quantises its input: q [m * k]
// bytes and the scales (DynamicToken: [m]; DynamicGroup: [m * k_blocks]
// row-major; Static: [1]). q = fp8(x * (1 / scale)), scale as Fp8Activation says.
struct Fp8Activations {
  std::vector<uint8_t> q;
  std::vector<float> scale;
};
Fp8Activations quantize_fp8_activations(const float* x, int64_t m, int64_t k,
                                        const LinearWeight& w);

// The dequantising scale of activation element (row, col) in `a`.
float fp8_activation_scale(const Fp8Activations& a, const LinearWeight& w, int64_t row,
                           int64_t col);

}  // namespace loom
