// Upload of host weights for the CUDA backend: matrices (2-D and up) become
// bf16, vectors (norm weights, biases, frequency tables) f32, quantised GGUF
// types are dequantised on the host first. Internal to backend/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include "core/tensor.h"

namespace loom::cuda {

// Device memory owned by the returned shared_ptr (cudaFree on release).
std::shared_ptr<void> device_alloc(size_t bytes);

class WeightStager;

// The device tensor for a host weight, in stream order on `stream`. With a
// stager the host side goes through its pinned buffers and the call returns
// once `host` has been read (the copy may still be in flight); without one it
// blocks until the upload is complete.
Tensor upload_weight(const Tensor& host, cudaStream_t stream, WeightStager* stager = nullptr);

}  // namespace loom::cuda
