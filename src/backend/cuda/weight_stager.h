// Host -> device copies of model weights at the speed of the host side: the
// source is pageable memory (a memory-mapped checkpoint, often still being
// read from disk), which a plain cudaMemcpy reads with one thread through the
// driver's own small staging. Here several threads copy each chunk into one
// of a few large pinned buffers (page faults and memcpy in parallel) while the
// DMA of the previous buffer runs. Used while a model loads; internal to
// backend/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <memory>

namespace loom {
class ThreadPool;
}

namespace loom::cuda {

class WeightStager {
 public:
  explicit WeightStager(int threads);
  ~WeightStager();  // waits for the copies still in flight
  WeightStager(const WeightStager&) = delete;
  WeightStager& operator=(const WeightStager&) = delete;

  // Queues the copy of [src, src + bytes) to dst_device on `stream` and
  // returns once src has been read: the caller may release it at once.
  void copy(void* dst_device, const void* src, size_t bytes, cudaStream_t stream);

 private:
  static constexpr size_t kSlotBytes = size_t{64} << 20;
  struct Slot {
    void* host = nullptr;
    cudaEvent_t done = nullptr;
    bool pending = false;
  };
  std::unique_ptr<ThreadPool> pool_;
  std::array<Slot, 3> slots_{};
  size_t next_ = 0;
};

// Threads for a WeightStager: the physical cores, at most 8 (memory bandwidth
// and the disk's queue, not the cores, bound it beyond that).
int weight_stager_threads();

}  // namespace loom::cuda
