// Host-side helpers of the CUDA backend: error checks that throw loom::Error,
// integer environment knobs, a grow-only stream-ordered device buffer, and an uploader that stages small
// host arrays through pinned memory so uploads never stall the host on the
// stream. Internal to backend/cuda; one thread (the engine thread) uses them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "core/error.h"
#include "core/ring_space.h"

namespace loom::cuda {

[[noreturn]] void throw_cuda_error(const char* file, int line, const char* expr, const char* what);

// The integer in environment variable `name` within [lo, hi], or `fallback`
// when unset or empty; anything else throws loom::Error naming the variable
// (the backend's tuning knobs for A/B runs).
int64_t env_int(const char* name, int64_t lo, int64_t hi, int64_t fallback);
// An L2 prefetch size in bytes for cp.async's hint (cp_async16_prefetch) from
// environment variable `name`: 0 (no hint), 128 or 256; unset or empty:
// fallback; anything else throws loom::Error naming the variable.
int env_l2_prefetch(const char* name, int fallback);

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

// Host -> device copies through one pinned staging ring. upload() returns as
// soon as the copy is queued; the caller may reuse `src` at once. A copy's
// bytes stay in the ring until its event says the copy is done; a new upload
// waits for that only when the ring has come round to them (normally long
// since done: a step makes a few uploads, the ring holds many steps' worth).
// The ring grows, rarely (to 8x the largest upload, doubling), by waiting for
// every copy in flight and replacing its memory: pinned memory is neither
// allocated nor freed per upload (cudaFreeHost waits for the whole device).
class PinnedUploader {
 public:
  PinnedUploader() = default;
  ~PinnedUploader();
  PinnedUploader(const PinnedUploader&) = delete;
  PinnedUploader& operator=(const PinnedUploader&) = delete;

  void upload(void* dst_device, const void* src, size_t bytes, cudaStream_t stream);
  // Bytes of pinned staging memory held.
  size_t capacity() const { return ring_.capacity(); }

 private:
  // The oldest copy's event back to spare_ (done); wait_oldest() waits for it
  // first and frees its ring bytes too.
  void retire_oldest();
  void wait_oldest();
  cudaEvent_t take_event();

  static constexpr size_t kMaxInFlight = 256;
  uint8_t* host_ = nullptr;
  RingSpace ring_;
  std::deque<cudaEvent_t> in_flight_;  // one per live ring allocation, oldest first
  std::vector<cudaEvent_t> spare_;     // completed, for reuse
};

}  // namespace loom::cuda
