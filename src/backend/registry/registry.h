// The backends this build carries and the one way to make them. Whether CUDA
// and NCCL are built in is decided by CMake (LOOM_CUDA, LOOM_MPI) and read
// only by registry.cpp: callers (the loom command, tests) never test build
// flags and make no device runtime calls. Any thread may call these; the
// backend returned is then used from one thread (backend.h).
#pragma once

#include <memory>
#include <string_view>

#include "backend/backend.h"
#include "backend/gpu_info.h"
#include "dist/communicator.h"

namespace loom {

enum class BackendKind { Cpu, Cuda };

// "cpu" or "cuda".
std::string_view backend_kind_name(BackendKind kind);

// Whether this build carries `kind` (always for the CPU).
bool backend_built(BackendKind kind);

// Whether a backend of `kind` can be made here: built and, for CUDA, a GPU
// visible to the CUDA runtime. Never throws.
bool backend_available(BackendKind kind);

// The backend `device` names: "cpu", "cuda", or "auto" (CUDA when available,
// else the CPU). Throws loom::Error, saying why, for "cuda" in a build without
// CUDA or on a machine without a usable GPU, and for any other name.
BackendKind choose_backend(std::string_view device);

struct BackendOptions {
  int cpu_threads = 0;  // BackendKind::Cpu: worker threads (0: all cores)
  int gpu_device = 0;   // BackendKind::Cuda: the GPU's index
};

// A new backend of `kind`. Throws loom::Error when `kind` is not built, or
// when its device cannot be used (no GPU, an architecture the build lacks).
std::unique_ptr<Backend> make_backend(BackendKind kind, const BackendOptions& options = {});

// The GPUs, driver and libraries of this machine (`loom env`); built is false,
// and nothing else set, without CUDA. Never throws.
GpuEnvironment gpu_environment();

// The communicator a tensor- or pipeline-parallel job runs its collectives on
// for `backend`'s tensors, built over `host` (the job's MPI group, taken
// over): `host` itself for the CPU; NCCL on GPU `gpu_device` and the backend's
// stream for CUDA. Throws loom::Error for CUDA in a build without NCCL. A
// collective call: every rank calls it.
std::unique_ptr<Communicator> make_device_communicator(Backend& backend,
                                                       std::unique_ptr<Communicator> host,
                                                       int gpu_device);

}  // namespace loom
