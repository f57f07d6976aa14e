// Upload of host weights for the CUDA backend: matrices (2-D and up) become
// bf16, vectors (norm weights, biases, frequency tables) f32, quantised GGUF
// types are dequantised on the host first. Internal to backend/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include "core/tensor.h"

namespace loom::cuda {

// Device memory owned by the returned shared_ptr (cudaFree on release).
std::shared_ptr<void> device_alloc(size_t bytes);

// The device tensor for a host weight; blocks until the upload is complete.
Tensor upload_weight(const Tensor& host, cudaStream_t stream);

}  // namespace loom::cuda
