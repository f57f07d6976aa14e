// A kernel that does nothing, looked up to learn whether this build carries
// code the current GPU can run (cudaFuncGetAttributes fails otherwise).
#include "backend/cuda/kernels/kernels.h"

namespace loom::cuda {
namespace {

__global__ void probe_kernel() {}

}  // namespace

cudaError_t probe_kernel_image() {
  cudaFuncAttributes attributes{};
  const cudaError_t err = cudaFuncGetAttributes(&attributes, probe_kernel);
  if (err != cudaSuccess) cudaGetLastError();  // not sticky: clear it
  return err;
}

}  // namespace loom::cuda
