// The CUDA backend (backend/cuda): bf16 activations, weights and KV cache, fp32
// accumulation, GEMMs through cuBLASLt, own kernels for the other ops. Only
// builds configured with -DLOOM_CUDA=ON compile and link this. Its users are
// the backend registry (backend/registry: make_backend, the one place that
// knows whether CUDA is built) and the CUDA tests and benchmarks.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/gpu_info.h"

namespace loom {

// True when the CUDA runtime sees at least one GPU. Never throws: false when
// the driver is missing or too old.
bool cuda_device_available();

// What the CUDA driver, runtime and libraries of this machine offer (built is
// true). Never throws.
GpuEnvironment cuda_environment();

// Throws loom::Error, naming the GPU, its compute capability and this build's
// architectures, when this build has no code GPU `device` can run.
void check_cuda_device_supported(int device);

// A backend on GPU `device`, with its own stream. Ops are asynchronous on that
// stream; copy_to_host and synchronize() wait for it. Call it from one thread
// (the engine thread); the device is made current there by the constructor.
std::unique_ptr<Backend> make_cuda_backend(int device = 0);

// The cudaStream_t (as void*) a CUDA backend runs its ops on, for benchmarks
// and tools that time them with CUDA events. Throws if `backend` is not CUDA.
void* cuda_backend_stream(Backend& backend);

// How many FP8 linear products of a CUDA backend have read their input rows
// quantised by the kernel that wrote them (rms_norm, add_rms_norm or
// gated_activation_fused given next_linear), for tests. Throws if `backend`
// is not CUDA.
uint64_t cuda_backend_fp8_prequantized(Backend& backend);

}  // namespace loom
