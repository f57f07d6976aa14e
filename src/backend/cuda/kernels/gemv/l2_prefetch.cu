// Weights into L2 ahead of the GEMM or GEMV that reads them: a step of few
// rows streams every weight once and is bound by memory, yet between the q,
// k, v projection and the o projection (rotary, cache writes, attention) the
// memory sits nearly idle. This kernel, queued there, asks for the next
// weights with bulk L2 prefetches (sm_90: cp.async.bulk.prefetch.L2, 16 KiB
// each, spread over the blocks so that many SMs' copy engines take part) and
// returns: the prefetches run on while the ops after it do. The backend
// queues it on a second stream forked after the ops before it (a branch off
// the recorded step's path), or in line: then launched with PDL (launch.cuh),
// it starts while the kernel before it ends and lets the next kernel start at
// once, and it waits for the kernel before it, so the kernel after it (whose
// pdl_wait() returns once this one has finished) still sees every earlier
// write.
#include <algorithm>

#include "backend/cuda/kernels/kernels.h"
#include "backend/cuda/kernels/launch.cuh"

namespace loom::cuda {
namespace {

constexpr int64_t kChunk = 16 * 1024;
constexpr int kThreads = 32;

struct Ranges {
  const unsigned char* ptr[kMaxL2PrefetchRanges];
  int chunks[kMaxL2PrefetchRanges];  // kChunk-byte pieces, the last one short
  int64_t bytes[kMaxL2PrefetchRanges];
  int count;
};

__global__ void __launch_bounds__(kThreads) l2_prefetch_kernel(const Ranges r) {
  pdl_trigger();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Piece g of the ranges laid end to end goes to block g % grid, thread
  // g / grid % kThreads.
  const int step = static_cast<int>(gridDim.x) * kThreads;
  const int mine = static_cast<int>(threadIdx.x * gridDim.x + blockIdx.x);
  int first = 0;  // pieces of the ranges before range i
#pragma unroll
  for (int i = 0; i < kMaxL2PrefetchRanges; ++i) {
    if (i >= r.count) break;
    for (int c = (mine + step - first % step) % step; c < r.chunks[i]; c += step) {
      const int64_t off = static_cast<int64_t>(c) * kChunk;
      const auto n = static_cast<uint32_t>(min(kChunk, r.bytes[i] - off));
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(r.ptr[i] + off), "r"(n)
                   : "memory");
    }
    first += r.chunks[i];
  }
#endif
  pdl_wait();
}

}  // namespace

void l2_prefetch(const L2PrefetchRange* ranges, int count, int max_blocks, bool programmatic,
                 cudaStream_t stream) {
  Ranges r{};
  int64_t pieces = 0;
  for (int i = 0; i < count && r.count < kMaxL2PrefetchRanges; ++i) {
    // 16-byte aligned starts and sizes (the instruction's rule), inside the range.
    const auto p = reinterpret_cast<uintptr_t>(ranges[i].ptr);
    const uintptr_t start = (p + 15) & ~uintptr_t{15};
    const int64_t skip = static_cast<int64_t>(start - p);
    const int64_t bytes =
        std::min<int64_t>(ranges[i].bytes - skip, int64_t{1} << 40) & ~int64_t{15};
    if (bytes <= 0) continue;
    r.ptr[r.count] = reinterpret_cast<const unsigned char*>(start);
    r.bytes[r.count] = bytes;
    r.chunks[r.count] = static_cast<int>((bytes + kChunk - 1) / kChunk);
    pieces += r.chunks[r.count];
    ++r.count;
  }
  if (r.count == 0 || max_blocks < 1) return;
  const int blocks = static_cast<int>(std::min<int64_t>(pieces, max_blocks));
  if (programmatic)
    launch_dependent(l2_prefetch_kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0,
                     stream, r);
  else
    l2_prefetch_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(r);
}

}  // namespace loom::cuda
