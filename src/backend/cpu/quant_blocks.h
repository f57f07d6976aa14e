// The GGUF weight block layouts (backend/quant/gguf_blocks.h) under their
// loom::cpu names; the GEMM's 8-bit activation blocks are in gemm.h. Internal
// to backend/cpu.
#pragma once

#include <cstdint>

#include "backend/quant/gguf_blocks.h"

namespace loom::cpu {

using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ4_K;
using quant::BlockQ4_Kx16;
using quant::BlockQ5_0;
using quant::BlockQ5_0x16;
using quant::BlockQ5_1;
using quant::BlockQ5_K;
using quant::BlockQ5_Kx16;
using quant::BlockQ6_K;
using quant::BlockQ6_Kx16;
using quant::BlockQ8_0;
using quant::BlockQ8_0x16;
using quant::k_scale_min;
using quant::kQK;
using quant::kQKK;

}  // namespace loom::cpu
