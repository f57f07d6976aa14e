// Host-side helpers of the CUDA backend: error checks that throw loom::Error,
// a grow-only stream-ordered device buffer, and an uploader that stages small
// host arrays through pinned memory so uploads never stall the host on the
// stream. Internal to backend/cuda; one thread (the engine thread) uses them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/error.h"

namespace loom::cuda {

[[noreturn]] void throw_cuda_error(const char* file, int line, const char* expr, const char* what);

}  // namespace loom::cuda

#define LOOM_CUDA_CHECK(expr)                                                               \
  do {                                                                                      \
    const cudaError_t loom_cuda_err_ = (expr);                                              \
    if (loom_cuda_err_ != cudaSuccess) [[unlikely]]                                         \
      ::loom::cuda::throw_cuda_error(__FILE__, __LINE__, #expr, cudaGetErrorString(loom_cuda_err_)); \
  } while (0)

namespace loom::cuda {

// Device memory that grows on demand, allocated and freed in stream order (so
// growing while earlier kernels still read the old memory is safe).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // At least `bytes` bytes (contents not kept when it grows).
  void* ensure(size_t bytes, cudaStream_t stream);
  // The same, all zero after growing (contents kept otherwise).
  void* ensure_zeroed(size_t bytes, cudaStream_t stream);
  void* data() const { return data_; }

  // Counts reallocations of every DeviceBuffer of the process: a recorded
  // step (CUDA graph) holding their old addresses is stale once it changes.
  static uint64_t reallocations();

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
  cudaStream_t stream_ = nullptr;
};

// Host -> device copies through a ring of pinned staging slots. upload()
// returns as soon as the copy is queued; the caller may reuse `src` at once.
// A slot is reused only after its previous copy completed (an event wait that
// is normally already satisfied: a step makes a few uploads, the ring holds
// several steps' worth).
class PinnedUploader {
 public:
  PinnedUploader() = default;
  ~PinnedUploader();
  PinnedUploader(const PinnedUploader&) = delete;
  PinnedUploader& operator=(const PinnedUploader&) = delete;

  void upload(void* dst_device, const void* src, size_t bytes, cudaStream_t stream);

 private:
  struct Slot {
    void* host = nullptr;
    size_t capacity = 0;
    cudaEvent_t done = nullptr;
    bool pending = false;
  };
  static constexpr int kSlots = 64;  // two steps in flight upload a few each (async scheduling)
  Slot slots_[kSlots];
  int next_ = 0;
};

}  // namespace loom::cuda
