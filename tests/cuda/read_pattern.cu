// bench_cuda_ops --read-pattern: how fast a GPU reads a weight matrix [n, k]
// of bytes in tiles of R rows x seg contiguous bytes of each row (the shape a
// matmul kernel's stage fetches: 64 rows x 128 bytes for a wgmma M=64 tile of
// one 128-column FP8 group, 16 rows x 1 KB for a 16-row tile, ...), each
// CUDA block walking its own run of tiles along k, as the split-k FP8 kernel
// does. Plain 16-byte streaming loads (ld.global.cs), no shared memory, no
// math but a XOR to keep the loads: the ceiling an access pattern puts on a
// kernel that reads it, apart from that kernel's pipeline.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>

#include "read_pattern.h"

namespace loom {
namespace {

constexpr int kThreads = 256;
constexpr int kTileBytes = 8192;  // 256 threads x 2 loads of 16 bytes

// Tile t of the matrix: row block t / segs, segment t % segs (k-major within
// a row block). Block b reads tiles [b * per_block, (b + 1) * per_block).
template <int kInFlight>
__global__ void __launch_bounds__(kThreads)
    read_tiles(const uint8_t* __restrict__ w, int64_t k, int seg, int64_t tiles, int64_t per_block,
               unsigned* sink) {
  const int64_t segs = k / seg;
  const int rows = kTileBytes / seg;
  int64_t t0 = blockIdx.x * per_block;
  int64_t t_end = t0 + per_block < tiles ? t0 + per_block : tiles;
  uint4 acc = make_uint4(0, 0, 0, 0);
  // Thread j's two loads of a tile: bytes 16 j and 16 j + 4096 of it.
  auto addr = [&](int64_t t, int part) {
    const int byte = (threadIdx.x + part * kThreads) * 16;
    const int64_t row = (t / segs) * rows + byte / seg;
    const int64_t col = (t % segs) * seg + byte % seg;
    return reinterpret_cast<const uint4*>(w + row * k + col);
  };
  for (int64_t t = t0; t < t_end; t += kInFlight / 2) {
    uint4 v[kInFlight];
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      const int64_t tt = t + i / 2;
      v[i] = tt < t_end ? __ldcs(addr(tt, i % 2)) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      acc.x ^= v[i].x;
      acc.y ^= v[i].y;
      acc.z ^= v[i].z;
      acc.w ^= v[i].w;
    }
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x12345678u) *sink = 1;  // never, in practice
}

}  // namespace

void bench_read_patterns(int iters) {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  unsigned* sink = nullptr;
  cudaMalloc(&sink, sizeof(unsigned));
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  std::printf(
      "\n== reading a weight matrix in tiles of R rows x seg bytes (k-major runs per block), "
      "16-byte streaming loads ==\n%-8s %6s %6s %8s %8s %10s %8s\n",
      "shape", "seg", "rows", "blk/SM", "loads", "us", "TB/s");
  for (const Shape s : {Shape{"gate_up", 28672, 4096}, Shape{"down", 4096, 14336},
                        Shape{"qkv", 6144, 4096}}) {
    uint8_t* w = nullptr;
    const size_t bytes = static_cast<size_t>(s.n * s.k);
    cudaMalloc(&w, bytes);
    cudaMemset(w, 0x3c, bytes);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int seg : {128, 256, 512, 1024, 2048, 4096}) {
      if (s.k % seg != 0 || s.n % (kTileBytes / seg) != 0) continue;
      const int64_t tiles = static_cast<int64_t>(bytes / kTileBytes);
      for (int blocks : {2, 4, 8}) {
        for (int loads : {4, 8, 16}) {
          const int64_t grid = static_cast<int64_t>(sms) * blocks;
          const int64_t per_block = (tiles + grid - 1) / grid;
          auto launch = [&] {
            if (loads == 4)
              read_tiles<4><<<static_cast<unsigned>(grid), kThreads>>>(w, s.k, seg, tiles,
                                                                       per_block, sink);
            else if (loads == 8)
              read_tiles<8><<<static_cast<unsigned>(grid), kThreads>>>(w, s.k, seg, tiles,
                                                                       per_block, sink);
            else
              read_tiles<16><<<static_cast<unsigned>(grid), kThreads>>>(w, s.k, seg, tiles,
                                                                        per_block, sink);
          };
          for (int i = 0; i < 3; ++i) launch();
          cudaEventRecord(a);
          for (int i = 0; i < iters; ++i) launch();
          cudaEventRecord(b);
          cudaEventSynchronize(b);
          float ms = 0;
          cudaEventElapsedTime(&ms, a, b);
          const double us = 1e3 * ms / iters;
          std::printf("%-8s %6d %6d %8d %8d %10.1f %8.2f\n", s.name, seg, kTileBytes / seg, blocks,
                      loads, us, static_cast<double>(bytes) / us / 1e6);
        }
      }
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaFree(w);
  }
  cudaFree(sink);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) std::printf("CUDA error: %s\n", cudaGetErrorString(err));
}

}  // namespace loom
