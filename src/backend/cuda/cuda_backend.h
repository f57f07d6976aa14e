// The CUDA backend (backend/cuda): bf16 activations, weights and KV cache, fp32
// accumulation, GEMMs through cuBLASLt, own kernels for the other ops. Only
// builds configured with -DLOOM_CUDA=ON compile and link this (they define
// LOOM_HAVE_CUDA=1); nothing else may include it.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace loom {

// True when the CUDA runtime sees at least one GPU. Never throws: false when
// the driver is missing or too old.
bool cuda_device_available();

// A backend on GPU `device`, with its own stream. Ops are asynchronous on that
// stream; copy_to_host and synchronize() wait for it. Call it from one thread
// (the engine thread); the device is made current there by the constructor.
std::unique_ptr<Backend> make_cuda_backend(int device = 0);

// The cudaStream_t (as void*) a CUDA backend runs its ops on, for benchmarks
// and tools that time them with CUDA events. Throws if `backend` is not CUDA.
void* cuda_backend_stream(Backend& backend);

}  // namespace loom
