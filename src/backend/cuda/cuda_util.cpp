// Error reporting, environment knobs, DeviceBuffer and PinnedUploader (see cuda_util.h).
#include "backend/cuda/cuda_util.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace loom::cuda {

void throw_cuda_error(const char* file, int line, const char* expr, const char* what) {
  throw Error(fmt::format("CUDA error: {} ({})", what, expr), file, line);
}

int64_t env_int(const char* name, int64_t lo, int64_t hi, int64_t fallback) {
  const char* env = std::getenv(name);
  if (!env || !*env) return fallback;
  const std::string_view text(env);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  LOOM_CHECK(ec == std::errc() && end == text.data() + text.size() && v >= lo && v <= hi,
             "{}={} must be an integer in [{}, {}]", name, text, lo, hi);
  return v;
}

int env_l2_prefetch(const char* name, int fallback) {
  const auto v = static_cast<int>(env_int(name, 0, 256, fallback));
  LOOM_CHECK(v == 0 || v == 128 || v == 256, "{}={} must be 0, 128 or 256", name, v);
  return v;
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
  for (cudaEvent_t e : in_flight_) {
    cudaEventSynchronize(e);
    cudaEventDestroy(e);
  }
  for (cudaEvent_t e : spare_) cudaEventDestroy(e);
  if (host_) cudaFreeHost(host_);
}

void PinnedUploader::retire_oldest() {
  spare_.push_back(in_flight_.front());
  in_flight_.pop_front();
}

void PinnedUploader::wait_oldest() {
  LOOM_CUDA_CHECK(cudaEventSynchronize(in_flight_.front()));
  retire_oldest();
  ring_.release_oldest();
}

cudaEvent_t PinnedUploader::take_event() {
  // Recycle the oldest copies' events once done (without waiting), so that
  // their number stays near the copies really in flight.
  while (!in_flight_.empty()) {
    const cudaError_t st = cudaEventQuery(in_flight_.front());
    if (st == cudaErrorNotReady) break;
    LOOM_CUDA_CHECK(st);
    retire_oldest();
    ring_.release_oldest();
  }
  if (!spare_.empty()) {
    cudaEvent_t e = spare_.back();
    spare_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void PinnedUploader::upload(void* dst_device, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  const size_t n = (bytes + 15) / 16 * 16;
  if (n > ring_.capacity() / 8) {
    size_t want = std::max<size_t>(ring_.capacity(), size_t{1} << 20);
    while (want < 8 * n) want *= 2;
    while (!in_flight_.empty()) wait_oldest();  // every copy from the old memory is done
    if (host_) LOOM_CUDA_CHECK(cudaFreeHost(host_));
    host_ = nullptr;
    ring_ = RingSpace();
    void* p = nullptr;
    LOOM_CUDA_CHECK(cudaMallocHost(&p, want));
    host_ = static_cast<uint8_t*>(p);
    ring_ = RingSpace(want);
  }
  cudaEvent_t done = take_event();
  // The host stays at most kMaxInFlight copies ahead of the stream.
  while (in_flight_.size() >= kMaxInFlight) wait_oldest();
  // (The ring frees its own entry after this wait.)
  const size_t at = ring_.allocate(n, [&] {
    LOOM_CUDA_CHECK(cudaEventSynchronize(in_flight_.front()));
    retire_oldest();
  });
  // Tracked before the copy is queued: if queuing throws, the entry's event
  // (never recorded) reads as complete and the ring stays consistent.
  in_flight_.push_back(done);
  std::memcpy(host_ + at, src, bytes);
  LOOM_CUDA_CHECK(cudaMemcpyAsync(dst_device, host_ + at, bytes, cudaMemcpyHostToDevice, stream));
  LOOM_CUDA_CHECK(cudaEventRecord(done, stream));
}

}  // namespace loom::cuda
