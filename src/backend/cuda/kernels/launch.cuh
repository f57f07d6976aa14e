// Programmatic dependent launch (PDL, sm_90 and later): a kernel launched
// with launch_dependent() may start while the kernel before it on the stream
// is still running, as soon as every block of that kernel has called
// pdl_trigger() (or exited). Such a kernel does work that needs nothing from
// the kernels before it (a GEMV's first weight loads) and then calls
// pdl_wait(), which returns once the kernels before it have finished and their
// writes are visible; it must not read or write any activation before that.
// pdl_wait() returns at once in a kernel launched the usual way, and
// pdl_trigger() is a no-op when no dependent kernel was launched with PDL.
// Stream capture keeps the relation as a programmatic edge of the graph.
// Internal to backend/cuda/kernels.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <utility>

#include "backend/cuda/kernels/kernels.h"

namespace loom::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem_bytes, stream>>>(args...), with PDL where
// programmatic_launch() is on. The kernel must call pdl_wait() before it
// touches anything another kernel writes or reads. Returns the launch's
// status (also left for cudaGetLastError, as with <<<>>>).
template <class... Params, class... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                             cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem_bytes;
  cfg.stream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = programmatic_launch() ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// Raises `kernel`'s dynamic shared-memory limit to `bytes` and prefers the
// largest shared-memory carveout, once per device: bit d of `configured` (a
// static of the caller, one per kernel) marks device d done; devices >= 64
// are set every time. False if the runtime refused (the error is left for
// cudaGetLastError); the caller then launches nothing.
template <class... Params>
bool configure_shared_memory(void (*kernel)(Params...), int bytes,
                             std::atomic<uint64_t>& configured) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (configured.load(std::memory_order_relaxed) & bit) != 0) return true;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) !=
          cudaSuccess ||
      cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                           cudaSharedmemCarveoutMaxShared) != cudaSuccess)
    return false;
  configured.fetch_or(bit, std::memory_order_relaxed);
  return true;
}

}  // namespace loom::cuda
