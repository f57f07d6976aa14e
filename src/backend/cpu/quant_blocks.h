// The 8-bit activation blocks the CPU matmul kernels multiply quantised weights
// with, and (from backend/quant/gguf_blocks.h) the GGUF weight block layouts
// under their loom::cpu names. Internal to backend/cpu.
#pragma once

#include <cstdint>

#include "backend/quant/gguf_blocks.h"

namespace loom::cpu {

using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ4_K;
using quant::BlockQ5_0;
using quant::BlockQ5_1;
using quant::BlockQ5_K;
using quant::BlockQ6_K;
using quant::BlockQ8_0;
using quant::k_scale_min;
using quant::kQK;
using quant::kQKK;

// Activation blocks (our own, never stored in files): f32 scale, |q| <= 127.
// Pairs with every 32-value block type: the sum lets kernels take unsigned
// weights (q + offset) and the min term of Q4_1 / Q5_1 out in one step.
struct ActQ8_1 {
  float d;
  int32_t sum;  // sum of qs
  int8_t qs[kQK];
};
struct ActQ8_K {  // pairs with K-quant weights; bsums[i] = sum of qs[16i, 16i+16)
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};
static_assert(sizeof(ActQ8_1) == 40 && sizeof(ActQ8_K) == 292);

}  // namespace loom::cpu
