// A kernel that does nothing, looked up to learn whether this build carries
// code the current GPU can run (cudaFuncGetAttributes fails otherwise), and
// the process-wide programmatic-launch switch (kernels/launch.cuh).
#include <atomic>

#include "backend/cuda/kernels/kernels.h"

namespace loom::cuda {
namespace {

__global__ void probe_kernel() {}

std::atomic<bool> g_programmatic_launch{false};

}  // namespace

void set_programmatic_launch(bool on) {
  g_programmatic_launch.store(on, std::memory_order_relaxed);
}

bool programmatic_launch() {
  return g_programmatic_launch.load(std::memory_order_relaxed);
}

cudaError_t probe_kernel_image() {
  cudaFuncAttributes attributes{};
  const cudaError_t err = cudaFuncGetAttributes(&attributes, probe_kernel);
  if (err != cudaSuccess) cudaGetLastError();  // not sticky: clear it
  return err;
}

}  // namespace loom::cuda
