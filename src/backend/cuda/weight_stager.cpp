#include "backend/cuda/weight_stager.h"

#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_util.h"
#include "core/thread_pool.h"

namespace loom::cuda {

int weight_stager_threads() {
  return std::clamp(ThreadPool::default_threads(), 1, 8);
}

WeightStager::WeightStager(int threads)
    : pool_(std::make_unique<ThreadPool>(std::max(1, threads))) {
  for (Slot& s : slots_) {
    LOOM_CUDA_CHECK(cudaMallocHost(&s.host, kSlotBytes));
    LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
  }
}

WeightStager::~WeightStager() {
  for (Slot& s : slots_) {
    if (s.done) {
      if (s.pending) cudaEventSynchronize(s.done);
      cudaEventDestroy(s.done);
    }
    if (s.host) cudaFreeHost(s.host);
  }
}

void WeightStager::copy(void* dst_device, const void* src, size_t bytes, cudaStream_t stream) {
  const auto* from = static_cast<const uint8_t*>(src);
  auto* to = static_cast<uint8_t*>(dst_device);
  // Pieces of at least 1 MiB per thread: smaller ones cost more in hand-offs
  // than the parallel copy wins.
  constexpr int64_t kGrain = int64_t{1} << 20;
  for (size_t off = 0; off < bytes; off += kSlotBytes) {
    const size_t n = std::min(kSlotBytes, bytes - off);
    Slot& s = slots_[next_];
    next_ = (next_ + 1) % slots_.size();
    if (s.pending) LOOM_CUDA_CHECK(cudaEventSynchronize(s.done));  // its previous DMA has read it
    s.pending = false;
    auto* host = static_cast<uint8_t*>(s.host);
    pool_->parallel_for(
        static_cast<int64_t>(n),
        [&](int64_t b, int64_t e) { std::memcpy(host + b, from + off + size_t(b), size_t(e - b)); },
        kGrain);
    LOOM_CUDA_CHECK(cudaMemcpyAsync(to + off, host, n, cudaMemcpyHostToDevice, stream));
    LOOM_CUDA_CHECK(cudaEventRecord(s.done, stream));
    s.pending = true;
  }
}

}  // namespace loom::cuda
