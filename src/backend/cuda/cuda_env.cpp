// cuda_environment() and check_cuda_device_supported(): what `loom env`
// prints and what the CUDA backend checks before it starts.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels/kernels.h"
#include "core/error.h"

#ifndef LOOM_CUDA_ARCH_LIST
#define LOOM_CUDA_ARCH_LIST "unknown"
#endif

namespace loom {
namespace {

// NCCL's version from the shared library, without linking it.
int nccl_version() {
  void* lib = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_LOCAL);
  if (!lib) return 0;
  int version = 0;
  using GetVersion = int (*)(int*);
  if (auto fn = reinterpret_cast<GetVersion>(dlsym(lib, "ncclGetVersion"))) {
    if (fn(&version) != 0) version = 0;
  }
  dlclose(lib);
  return version;
}

std::string unsupported_message(const GpuInfo& g, cudaError_t err) {
  return fmt::format("GPU {} ({}, compute capability {}.{}) cannot run this build of loom, which carries "
                     "code for the CUDA architectures {} only ({}); rebuild with -DLOOM_CUDA_ARCHS={}{}",
                     g.index, g.name, g.major, g.minor, LOOM_CUDA_ARCH_LIST, cudaGetErrorString(err), g.major,
                     g.minor);
}

GpuInfo gpu_info(int index) {
  GpuInfo g;
  g.index = index;
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, index) != cudaSuccess) {
    cudaGetLastError();
    g.problem = "cannot read the device's properties";
    return g;
  }
  g.name = p.name;
  g.major = p.major;
  g.minor = p.minor;
  g.multiprocessors = p.multiProcessorCount;
  g.memory_total = p.totalGlobalMem;
  int previous = 0;
  cudaGetDevice(&previous);
  if (cudaSetDevice(index) == cudaSuccess) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) g.memory_free = free_b;
    const cudaError_t err = cuda::probe_kernel_image();
    g.supported = err == cudaSuccess;
    if (!g.supported) g.problem = unsupported_message(g, err);
    cudaSetDevice(previous);
  }
  cudaGetLastError();
  return g;
}

}  // namespace

GpuEnvironment cuda_environment() {
  GpuEnvironment env;
  env.built = true;
  env.build_archs = LOOM_CUDA_ARCH_LIST;
  env.cublaslt_version = cublasLtGetVersion();
  env.nccl_version = nccl_version();
  cudaDriverGetVersion(&env.driver_version);
  cudaRuntimeGetVersion(&env.runtime_version);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    env.error = cudaGetErrorString(err);
    return env;
  }
  for (int i = 0; i < count; ++i) env.gpus.push_back(gpu_info(i));
  return env;
}

void check_cuda_device_supported(int device) {
  const GpuInfo g = gpu_info(device);
  LOOM_CHECK(g.supported, "{}", g.problem.empty() ? "the GPU cannot be used" : g.problem);
}

}  // namespace loom
