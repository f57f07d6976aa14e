// Error reporting, DeviceBuffer and PinnedUploader (see cuda_util.h).
#include "backend/cuda/cuda_util.h"

#include <atomic>
#include <cstring>

namespace loom::cuda {

void throw_cuda_error(const char* file, int line, const char* expr, const char* what) {
  throw Error(fmt::format("CUDA error: {} ({})", what, expr), file, line);
}

namespace {
std::atomic<uint64_t> g_reallocations{0};
}  // namespace

uint64_t DeviceBuffer::reallocations() { return g_reallocations.load(std::memory_order_relaxed); }

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFreeAsync(data_, stream_);
}

void* DeviceBuffer::ensure(size_t bytes, cudaStream_t stream) {
  if (bytes <= capacity_ && data_) return data_;
  if (data_) {
    g_reallocations.fetch_add(1, std::memory_order_relaxed);
    LOOM_CUDA_CHECK(cudaFreeAsync(data_, stream_));
  }
  data_ = nullptr;
  capacity_ = 0;
  const size_t want = bytes < 256 ? 256 : bytes + bytes / 4;  // headroom: fewer regrowths
  LOOM_CUDA_CHECK(cudaMallocAsync(&data_, want, stream));
  capacity_ = want;
  stream_ = stream;
  return data_;
}

void* DeviceBuffer::ensure_zeroed(size_t bytes, cudaStream_t stream) {
  if (bytes <= capacity_ && data_) return data_;
  void* d = ensure(bytes, stream);
  LOOM_CUDA_CHECK(cudaMemsetAsync(d, 0, capacity_, stream));
  return d;
}

PinnedUploader::~PinnedUploader() {
  for (Slot& s : slots_) {
    if (s.done) {
      cudaEventSynchronize(s.done);
      cudaEventDestroy(s.done);
    }
    if (s.host) cudaFreeHost(s.host);
  }
}

void PinnedUploader::upload(void* dst_device, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  Slot& s = slots_[next_];
  next_ = (next_ + 1) % kSlots;
  if (!s.done) LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
  if (s.pending) LOOM_CUDA_CHECK(cudaEventSynchronize(s.done));
  s.pending = false;
  if (bytes > s.capacity) {
    if (s.host) LOOM_CUDA_CHECK(cudaFreeHost(s.host));
    s.host = nullptr;
    s.capacity = 0;
    const size_t want = bytes < 4096 ? 4096 : bytes + bytes / 2;
    LOOM_CUDA_CHECK(cudaMallocHost(&s.host, want));
    s.capacity = want;
  }
  std::memcpy(s.host, src, bytes);
  LOOM_CUDA_CHECK(cudaMemcpyAsync(dst_device, s.host, bytes, cudaMemcpyHostToDevice, stream));
  LOOM_CUDA_CHECK(cudaEventRecord(s.done, stream));
  s.pending = true;
}

}  // namespace loom::cuda
