// The backend registry: the only file that knows which backends this build
// carries. CMake defines LOOM_HAVE_CUDA (with -DLOOM_CUDA=ON) and
// LOOM_HAVE_NCCL (CUDA and MPI) for this file alone.
#include "backend/registry/registry.h"

#include "core/error.h"

#if LOOM_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif
#if LOOM_HAVE_NCCL
#include "dist/nccl/nccl_communicator.h"
#endif

namespace loom {

std::string_view backend_kind_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::Cpu:
      return "cpu";
    case BackendKind::Cuda:
      return "cuda";
  }
  LOOM_THROW("unknown backend kind {}", static_cast<int>(kind));
}

bool backend_built(BackendKind kind) {
  if (kind == BackendKind::Cpu) return true;
#if LOOM_HAVE_CUDA
  return kind == BackendKind::Cuda;
#else
  return false;
#endif
}

bool backend_available(BackendKind kind) {
  if (!backend_built(kind)) return false;
#if LOOM_HAVE_CUDA
  if (kind == BackendKind::Cuda) return cuda_device_available();
#endif
  return true;
}

BackendKind choose_backend(std::string_view device) {
  if (device == "cpu") return BackendKind::Cpu;
  if (device == "auto")
    return backend_available(BackendKind::Cuda) ? BackendKind::Cuda : BackendKind::Cpu;
  if (device == "cuda") {
    if (!backend_built(BackendKind::Cuda))
      LOOM_THROW("--device cuda: this loom was built without CUDA (configure with -DLOOM_CUDA=ON)");
    if (!backend_available(BackendKind::Cuda))
      LOOM_THROW("--device cuda: no usable CUDA GPU is visible");
    return BackendKind::Cuda;
  }
  LOOM_THROW("unknown device '{}' (auto, cpu or cuda)", device);
}

std::unique_ptr<Backend> make_backend(BackendKind kind, const BackendOptions& options) {
  if (kind == BackendKind::Cpu) return make_cpu_backend(options.cpu_threads);
#if LOOM_HAVE_CUDA
  if (kind == BackendKind::Cuda) {
    if (!cuda_device_available()) LOOM_THROW("no usable CUDA GPU is visible");
    return make_cuda_backend(options.gpu_device);
  }
#endif
  LOOM_THROW("this loom was built without the {} backend", backend_kind_name(kind));
}

GpuEnvironment gpu_environment() {
#if LOOM_HAVE_CUDA
  return cuda_environment();
#else
  return GpuEnvironment{};
#endif
}

std::unique_ptr<Communicator> make_device_communicator(Backend& backend,
                                                       std::unique_ptr<Communicator> host,
                                                       int gpu_device) {
  if (backend.device() == Device::Cpu) return host;
#if LOOM_HAVE_NCCL
  return make_nccl_communicator(std::move(host), gpu_device, cuda_backend_stream(backend));
#else
  (void)gpu_device;
  LOOM_THROW("tensor and pipeline parallelism on {} need NCCL: configure with -DLOOM_MPI=ON",
             backend.name());
#endif
}

}  // namespace loom
