// The checks the sm_90a FP8 kernels behind fp8_block_gemm.h share, without
// CUTLASS's headers (so that a kernel written without CUTLASS's collectives
// compiles quickly). Internal to backend/cuda/kernels/fp8.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels/fp8/fp8_block_gemm.h"

namespace loom::cuda::sm90 {

inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// The current device, its compute capability (major * 10 + minor) and SM count.
inline bool device_info(int& device, int& cc, int& sms) {
  int major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    return false;
  cc = major * 10 + minor;
  return true;
}

// What every problem needs before CUTLASS's own check: an sm_90 GPU (sm_90a
// code runs on 9.0 only), n and k multiples of n_mult and k_mult, int-sized
// extents, 16-byte aligned w, out and bias.
inline bool shape_ok(const Fp8BlockGemmArgs& a, int64_t n_mult, int64_t k_mult, int& device,
                     int& sms) {
  int cc = 0;
  if (!device_info(device, cc, sms) || cc != 90) return false;
  constexpr int64_t kMaxInt = 0x7fffffff;
  if (a.m <= 0 || a.n <= 0 || a.k <= 0 || a.n % n_mult != 0 || a.k % k_mult != 0) return false;
  if (a.m * a.k > kMaxInt || a.n * a.k > kMaxInt || a.m * a.n > kMaxInt) return false;
  if (!aligned16(a.w) || !aligned16(a.out)) return false;
  return !a.bias || aligned16(a.bias);
}

}  // namespace loom::cuda::sm90
