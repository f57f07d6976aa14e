// The CUDA backend (backend/cuda): bf16 activations, weights and KV cache, fp32
// accumulation, GEMMs through cuBLASLt, own kernels for the other ops. Only
// builds configured with -DLOOM_CUDA=ON compile and link this (they define
// LOOM_HAVE_CUDA=1); nothing else may include it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace loom {

// True when the CUDA runtime sees at least one GPU. Never throws: false when
// the driver is missing or too old.
bool cuda_device_available();

struct CudaGpuInfo {
  int index = 0;
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
  size_t memory_total = 0, memory_free = 0;
  bool supported = false;    // this build carries code it can run
  std::string problem;       // why not, when unsupported
};

struct CudaEnvironment {
  int driver_version = 0;    // e.g. 13000 for 13.0 (0: no driver)
  int runtime_version = 0;
  size_t cublaslt_version = 0;
  int nccl_version = 0;      // 0: libnccl not found
  std::string build_archs;   // the architectures compiled in, e.g. "90a,80"
  std::vector<CudaGpuInfo> gpus;
  std::string error;         // set when the driver or runtime cannot be used
};

// What the CUDA driver, runtime and libraries of this machine offer. Never throws.
CudaEnvironment cuda_environment();

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

}  // namespace loom
