// Micro-benchmark of the CUDA backend's ops at Llama-3-8B shapes (hidden 4096,
// MLP 14336, 32 q / 8 kv heads of 128, vocab 128256), timed with CUDA events
// on the backend's stream. Prints time, achieved TB/s and TFLOP/s; asserts
// nothing. Weights and caches hold a constant bf16 pattern (values do not
// change the speed of these kernels). Prefill attention is timed through the
// flash kernel and through the CUDA-core kernel (LOOM_FLASH_PREFILL=0);
// GEMMs of 1, 2 and 4 rows through loom's choice and through cuBLASLt only;
// FP8 linear layers (per-row and 128x128-block scales) through the small-m
// tensor-core kernel and cuBLASLt's FP8 GEMM, and prefill-sized GEMMs bf16 vs
// FP8 per-row vs FP8 block-scaled (CUTLASS on sm_90); decode attention over
// bf16 and FP8 KV caches.
// Long-context decode attention has its own table (contexts 8k-128k, batch
// 1-64, GQA 4 and 8, bf16 and FP8 KV); --attn-sweep instead sweeps the decode
// split's LOOM_ATTN_* knobs over a few of those shapes and prints only that.
// --matmul prints the bf16 and FP8 matmul tables (and the prefill GEMMs') only.
// --read-pattern prints the DRAM read rate of weight matrices by the tile
// shape (rows x contiguous bytes) a kernel fetches them in.
// --gemm-host prints the host time of a bf16 and an FP8 matmul call at row counts new to
// the backend and seen before (0.5B shapes).
// --fp8-tiles [iterations] times the per-row scaled CUTLASS GEMM alone (x
// already quantised) from decode-batch to prefill row counts, with and
// without fast accumulation, at the tile LOOM_FP8_ROW_TILE forces (0 or
// unset: the tile chosen by shape; Fp8BlockGemmArgs::large_tile).
// --small-ops [iterations] prints the row and elementwise ops' table only.
// --decode-attn SEQS CTX bf16|fp8 [iterations] [kv heads] [head_dim] [group]
// times one decode attention shape (for profilers; 8 kv heads of 128 and 4
// query heads each by default).
// Usage: bench_cuda_ops [iterations] | bench_cuda_ops --attn-sweep|--matmul [iterations]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/kernels/fp8/fp8_block_gemm.h"
#include "backend/cuda/kernels/kernels.h"
#include "read_pattern.h"

namespace loom {
namespace {

// A linear layer's weight [n, k].
struct Shape {
  const char* name;
  int64_t n, k;
};
// The 8B shape's projections (qkv and gate_up fused).
constexpr Shape kShapes8b[] = {
    {"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};

struct Timer {
  cudaStream_t stream;
  int iters;
  // Mean milliseconds of fn over iters runs, after 3 warm-up runs.
  double ms(const std::function<void()>& fn) {
    for (int i = 0; i < 3; ++i) fn();
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a, stream);
    for (int i = 0; i < iters; ++i) fn();
    cudaEventRecord(b, stream);
    cudaEventSynchronize(b);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return static_cast<double>(t) / iters;
  }
};

Tensor filled(Backend& be, DType t, std::vector<int64_t> shape, cudaStream_t stream) {
  Tensor x = be.alloc(t, std::move(shape));
  cudaMemsetAsync(x.data(), 0x3c, static_cast<size_t>(x.nbytes()), stream);  // bf16 0x3c3c = 0.0115
  return x;
}

void bench_matmul(Backend& be, Timer& timer, cudaStream_t stream, const char* path,
                  std::initializer_list<int64_t> ms) {
  const Shape shapes[] = {{"qkv", 6144, 4096},
                          {"o", 4096, 4096},
                          {"gate_up", 28672, 4096},
                          {"down", 4096, 14336},
                          {"lm_head", 128256, 4096}};
  std::vector<Tensor> w;
  for (const Shape& s : shapes) w.push_back(filled(be, DType::BF16, {s.n, s.k}, stream));
  std::printf("\n== matmul (bf16, %s) ==\n%-8s %5s %7s %6s %10s %8s %9s\n", path, "shape", "M", "N",
              "K", "us", "TB/s", "TFLOP/s");
  for (int64_t m : ms) {
    double step_ms = 0;
    for (size_t i = 0; i < std::size(shapes); ++i) {
      const Shape& s = shapes[i];
      Tensor x = filled(be, DType::BF16, {m, s.k}, stream);
      Tensor out = be.alloc(DType::BF16, {m, s.n});
      const double ms = timer.ms([&] { be.matmul(x, w[i], nullptr, out); });
      const double bytes = 2.0 * (m * s.k + s.n * s.k + m * s.n);
      const double flops = 2.0 * m * s.n * s.k;
      std::printf("%-8s %5lld %7lld %6lld %10.1f %8.2f %9.1f\n", s.name, static_cast<long long>(m),
                  static_cast<long long>(s.n), static_cast<long long>(s.k), ms * 1e3,
                  bytes / ms / 1e9, flops / ms / 1e9);
      step_ms += (i + 1 == std::size(shapes)) ? ms : 32 * ms;
    }
    std::printf("  -> one forward step's GEMMs at M=%lld (32 layers + lm_head): %.2f ms\n",
                static_cast<long long>(m), step_ms);
  }
}

// An FP8 weight [n, k] and its scales as Fp8Gemm takes them: per row, or
// per 128x128 block (scale rows scale_ld apart) with per-group activations.
cuda::Fp8WeightView fp8_view(const Tensor& w, const Tensor& scale, bool block = false,
                             int64_t scale_ld = 0) {
  cuda::Fp8WeightView v;
  v.w = w.data_as<const uint8_t>();
  v.n = w.rows();
  v.k = w.cols();
  v.scale = scale.data_as<const float>();
  v.scale_ld = scale_ld;
  v.block = block;
  v.activation = block ? Fp8Activation::DynamicGroup : Fp8Activation::DynamicToken;
  return v;
}

// Host time of one matmul call, bf16 and FP8 per-row (enqueueing, not the
// GPU's work), at a row count the backend has not seen (its first call: where
// no plan serves it, a cuBLASLt plan and heuristic query) and at one it has,
// at the 0.5B shape's projections: a step mixing prefill chunks with decodes
// has a new row count nearly every time. 200 row counts (40 in [9, 48], 160 in
// [513, 16384]), the stream drained between calls.
void bench_matmul_host(Backend& be, cudaStream_t stream) {
  const Shape shapes[] = {
      {"qkv", 1152, 896}, {"o", 896, 896}, {"gate_up", 9728, 896}, {"down", 896, 4864}};
  constexpr int64_t kMaxRows = 16384;
  auto pct = [](std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
  };
  // Host microseconds of run(m) at 200 row counts: its first call at each
  // (new) and its second (seen); 9-48 rows then 513-16384 (mixed steps).
  auto table = [&](const char* name, const std::function<void(int64_t)>& run) {
    std::vector<double> fresh, seen;
    for (int j = 0; j < 200; ++j) {
      const int64_t m = j < 40 ? 9 + j % 56 : 513 + (int64_t{j} * 7919) % (kMaxRows - 512);
      for (int rep = 0; rep < 2; ++rep) {
        cudaStreamSynchronize(stream);
        const auto t0 = std::chrono::steady_clock::now();
        run(m);
        const double us =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count();
        (rep == 0 ? fresh : seen).push_back(us);
      }
    }
    cudaStreamSynchronize(stream);
    std::printf("%-8s %10.1f %10.1f %10.1f %10.1f\n", name, pct(fresh, 0.5), pct(fresh, 0.9),
                pct(seen, 0.5), pct(seen, 0.9));
  };
  std::printf(
      "\n== matmul host time per call (0.5B shapes, 200 row counts: 40 of 9-48, 160 of 513-16384) "
      "==\n-- bf16\n%-8s %10s %10s %10s %10s\n",
      "shape", "new p50", "new p90", "seen p50", "seen p90");
  for (const Shape& s : shapes) {
    Tensor w = filled(be, DType::BF16, {s.n, s.k}, stream);
    Tensor x = filled(be, DType::BF16, {kMaxRows, s.k}, stream);
    Tensor out = be.alloc(DType::BF16, {kMaxRows, s.n});
    table(s.name, [&](int64_t m) {
      Tensor xm = x.slice_rows(0, m);
      Tensor om = out.slice_rows(0, m);
      be.matmul(xm, w, nullptr, om);
    });
  }
  // FP8 per-row weights (what --quantization fp8 makes), each path as the
  // backend picks it: cuBLASLt up to 64 rows, CUTLASS past that.
  std::printf("-- FP8 per-row scales, dynamic per-token activations\n");
  cuda::Fp8Gemm gemm(stream);
  for (const Shape& s : shapes) {
    Tensor w = filled(be, DType::F8_E4M3, {s.n, s.k}, stream);
    Tensor sc = filled(be, DType::F32, {s.n}, stream);
    Tensor x = filled(be, DType::BF16, {kMaxRows, s.k}, stream);
    Tensor out = be.alloc(DType::BF16, {kMaxRows, s.n});
    const cuda::Fp8WeightView v = fp8_view(w, sc);
    table(s.name, [&](int64_t m) { gemm.run(x.data(), m, v, nullptr, out.data()); });
  }
}

// FP8 linear layers at the bf16 table's shapes: weights [N, K] in E4M3 with
// per-row or 128x128-block scales, x bf16 (quantised per token / per 1x128
// group inside), through the small-m tensor-core kernel (M <= 8), cuBLASLt's
// FP8 GEMM and (sm_90) CUTLASS's (per-row scales at every M, block scales
// past 8 rows) and the split-k kernel (per-row scales, M <= 16). TB/s counts x (bf16), the FP8
// weight and out (bf16).
void bench_fp8_matmul(Backend& be, Timer& timer, cudaStream_t stream) {
  const auto& shapes = kShapes8b;
  cuda::Fp8Gemm gemm(stream);
  for (bool block : {false, true}) {
    std::printf(
        "\n== matmul (FP8 E4M3 weights, %s scales, W8A8) ==\n%-8s %-9s %5s %7s %6s %10s %8s %9s\n",
        block ? "128x128 block" : "per-row", "shape", "path", "M", "N", "K", "us", "TB/s",
        "TFLOP/s");
    std::vector<Tensor> w, sc;
    for (const Shape& s : shapes) {
      w.push_back(filled(be, DType::F8_E4M3, {s.n, s.k}, stream));
      sc.push_back(filled(be, DType::F32,
                          {block ? (s.n + 127) / 128 * ((s.k + 127) / 128 + 3) : s.n}, stream));
    }
    for (int64_t m : {1, 2, 4, 8, 16, 64, 256, 1024}) {
      for (int variant = 0; variant < 7; ++variant) {
        // The paths, then cuBLASLt's and CUTLASS's with fast accumulation (per-row scales).
        const bool fast = variant >= 5;
        const cuda::Fp8Gemm::Path path =
            std::array{cuda::Fp8Gemm::Path::SmallM,   cuda::Fp8Gemm::Path::Stream,
                       cuda::Fp8Gemm::Path::RowSplit, cuda::Fp8Gemm::Path::CublasLt,
                       cuda::Fp8Gemm::Path::Cutlass,  cuda::Fp8Gemm::Path::CublasLt,
                       cuda::Fp8Gemm::Path::Cutlass}[variant];
        if (fast && block) continue;
        if (path == cuda::Fp8Gemm::Path::SmallM && m > 8) continue;
        if (path == cuda::Fp8Gemm::Path::RowSplit && (block || m > cuda::kFp8RowSplitMaxRows))
          continue;
        if (path == cuda::Fp8Gemm::Path::Stream && m > 2) continue;
        if (path == cuda::Fp8Gemm::Path::Cutlass && block && m <= 8) continue;
        const char* name = fast ? (path == cuda::Fp8Gemm::Path::Cutlass ? "cutl-fast" : "cblt-fast")
                           : path == cuda::Fp8Gemm::Path::SmallM   ? "kernel"
                           : path == cuda::Fp8Gemm::Path::Stream   ? "stream"
                           : path == cuda::Fp8Gemm::Path::Cutlass  ? "cutlass"
                           : path == cuda::Fp8Gemm::Path::RowSplit ? "split-k"
                                                                   : "cublaslt";
        gemm.set_fast_accum(fast);
        double step_ms = 0;
        for (size_t i = 0; i < std::size(shapes); ++i) {
          const Shape& s = shapes[i];
          const cuda::Fp8WeightView v =
              fp8_view(w[i], sc[i], block, block ? ((s.k + 127) / 128 + 3) / 4 * 4 : 0);
          Tensor x = filled(be, DType::BF16, {m, s.k}, stream);
          Tensor out = be.alloc(DType::BF16, {m, s.n});
          gemm.force_path(path);
          double ms = 0;
          try {
            ms = timer.ms([&] { gemm.run(x.data(), m, v, nullptr, out.data()); });
          } catch (const std::exception& e) {
            std::printf("%-8s %-9s %5lld: %s\n", s.name, name, static_cast<long long>(m), e.what());
            continue;
          }
          const double bytes = 2.0 * m * s.k + 1.0 * s.n * s.k + 2.0 * m * s.n;
          const double flops = 2.0 * m * s.n * s.k;
          std::printf("%-8s %-9s %5lld %7lld %6lld %10.1f %8.2f %9.1f\n", s.name, name,
                      static_cast<long long>(m), static_cast<long long>(s.n),
                      static_cast<long long>(s.k), ms * 1e3, bytes / ms / 1e9, flops / ms / 1e9);
          step_ms += 32 * ms;
        }
        std::printf(
            "  -> one forward step's FP8 GEMMs at M=%lld (32 layers, no lm_head), %s: %.2f ms\n",
            static_cast<long long>(m), name, step_ms);
      }
    }
  }
  gemm.set_fast_accum(false);
  gemm.force_path(std::nullopt);
}

// --fp8-tiles: fp8_block_gemm's per-row scaled product on its own (x's rows
// and scales already there) at the 8B shapes, promoted and fast accumulation.
void bench_fp8_tiles(Backend& be, Timer& timer, cudaStream_t stream) {
  const auto& shapes = kShapes8b;
  const char* env = std::getenv("LOOM_FP8_ROW_TILE");
  const int tile = env ? std::atoi(env) : 0;
  constexpr int64_t kMaxRows = 16384;
  constexpr size_t kWorkspace = size_t{64} << 20;
  void* workspace = nullptr;
  if (cudaMalloc(&workspace, kWorkspace) != cudaSuccess) {
    std::printf("--fp8-tiles: no memory for the workspace\n");
    return;
  }
  std::printf(
      "\n== FP8 per-row GEMM alone (CUTLASS, x quantised before), LOOM_FP8_ROW_TILE=%d ==\n"
      "%-8s %6s %7s %6s %10s %9s %10s %9s\n",
      tile, "shape", "M", "N", "K", "us", "TFLOP/s", "us fast", "TFLOP/s");
  std::vector<Tensor> w, ws;
  for (const Shape& s : shapes) {
    w.push_back(filled(be, DType::F8_E4M3, {s.n, s.k}, stream));
    ws.push_back(filled(be, DType::F32, {s.n}, stream));
  }
  Tensor xq = filled(be, DType::F8_E4M3, {kMaxRows, 14336}, stream);
  Tensor xs = filled(be, DType::F32, {kMaxRows}, stream);
  Tensor out = be.alloc(DType::BF16, {kMaxRows, 28672});
  for (int64_t m : {128, 256, 384, 512, 768, 1024, 2048, 4096, 16384}) {
    double step[2] = {0, 0};
    for (size_t i = 0; i < std::size(shapes); ++i) {
      const Shape& s = shapes[i];
      cuda::Fp8BlockGemmArgs a;
      a.row_scales = true;
      a.xq = xq.data_as<const uint8_t>();
      a.x_scale = xs.data_as<const float>();
      a.m = m;
      a.w = w[i].data_as<const uint8_t>();
      a.w_scale = ws[i].data_as<const float>();
      a.n = s.n;
      a.k = s.k;
      a.out = out.data();
      a.large_tile = tile;
      double us[2] = {0, 0};
      for (int fast = 0; fast < 2; ++fast) {
        a.fast_accum = fast == 1;
        if (!cuda::fp8_block_gemm_supported(a)) continue;
        const char* err = nullptr;
        const double ms = timer.ms([&] {
          if (const char* e = cuda::fp8_block_gemm(a, workspace, kWorkspace, stream)) err = e;
        });
        if (err) {
          std::printf("%-8s %6lld: %s\n", s.name, static_cast<long long>(m), err);
          continue;
        }
        us[fast] = ms * 1e3;
        step[fast] += 32 * ms;
      }
      const double gflop = 2.0 * m * s.n * s.k / 1e9;
      std::printf("%-8s %6lld %7lld %6lld %10.1f %9.1f %10.1f %9.1f\n", s.name,
                  static_cast<long long>(m), static_cast<long long>(s.n),
                  static_cast<long long>(s.k), us[0], us[0] > 0 ? gflop / us[0] * 1e3 : 0.0, us[1],
                  us[1] > 0 ? gflop / us[1] * 1e3 : 0.0);
    }
    std::printf("  -> a step's FP8 GEMMs at M=%lld (32 layers): %.3f ms, fast %.3f ms\n",
                static_cast<long long>(m), step[0], step[1]);
  }
  cudaFree(workspace);
}

// Prefill-sized GEMMs side by side at the 8B shapes: bf16 (Backend::matmul),
// FP8 with per-row scales (cuBLASLt; CUTLASS's row-scaled GEMM), FP8 with 128x128-block scales
// through CUTLASS's blockwise-scaled GEMM (sm_90) and through our tiled kernel (what block scales
// got before). FP8 times include quantising x. TFLOP/s.
void bench_fp8_block_gemm(Backend& be, Timer& timer, cudaStream_t stream) {
  using Path = cuda::Fp8Gemm::Path;
  const auto& shapes = kShapes8b;
  cuda::Fp8Gemm gemm(stream);
  std::printf(
      "\n== prefill GEMMs: bf16 vs FP8 per-row (cuBLASLt; CUTLASS; both with fast accumulation) "
      "vs FP8 128x128 blocks (CUTLASS; tiled) ==\n"
      "%-8s %5s %7s %6s %14s %14s %14s %14s %14s %14s %14s\n",
      "shape", "M", "N", "K", "bf16 TFLOP/s", "fp8-row", "fp8-row cutl", "row fast",
      "row cutl fast", "fp8-blk cutl", "fp8-blk tiled");
  for (int64_t m : {64, 256, 2048, 8192}) {
    for (const Shape& s : shapes) {
      Tensor wb = filled(be, DType::BF16, {s.n, s.k}, stream);
      Tensor wq = filled(be, DType::F8_E4M3, {s.n, s.k}, stream);
      const int64_t ld = ((s.k + 127) / 128 + 3) / 4 * 4;
      Tensor row_scale = filled(be, DType::F32, {s.n}, stream);
      Tensor blk_scale = filled(be, DType::F32, {(s.n + 127) / 128 * ld}, stream);
      Tensor x = filled(be, DType::BF16, {m, s.k}, stream);
      Tensor out = be.alloc(DType::BF16, {m, s.n});
      const double flops = 2.0 * m * s.n * s.k;
      auto tflops = [&](const std::function<void()>& fn) {
        try {
          return flops / timer.ms(fn) / 1e9;
        } catch (const std::exception& e) {
          std::printf("  (%s M %lld: %s)\n", s.name, static_cast<long long>(m), e.what());
          return 0.0;
        }
      };
      const double bf16 = tflops([&] { be.matmul(x, wb, nullptr, out); });
      cuda::Fp8WeightView v = fp8_view(wq, row_scale);
      gemm.force_path(Path::CublasLt);
      const double row = tflops([&] { gemm.run(x.data(), m, v, nullptr, out.data()); });
      gemm.force_path(Path::Cutlass);
      const double row_cutlass = tflops([&] { gemm.run(x.data(), m, v, nullptr, out.data()); });
      gemm.set_fast_accum(true);
      gemm.force_path(Path::CublasLt);
      const double row_fast = tflops([&] { gemm.run(x.data(), m, v, nullptr, out.data()); });
      gemm.force_path(Path::Cutlass);
      const double row_cutlass_fast =
          tflops([&] { gemm.run(x.data(), m, v, nullptr, out.data()); });
      gemm.set_fast_accum(false);
      v = fp8_view(wq, blk_scale, true, ld);
      gemm.force_path(Path::Cutlass);
      const double cutlass = tflops([&] { gemm.run(x.data(), m, v, nullptr, out.data()); });
      gemm.force_path(Path::Tiled);
      const double tiled = tflops([&] { gemm.run(x.data(), m, v, nullptr, out.data()); });
      std::printf("%-8s %5lld %7lld %6lld %14.1f %14.1f %14.1f %14.1f %14.1f %14.1f %14.1f\n",
                  s.name, static_cast<long long>(m), static_cast<long long>(s.n),
                  static_cast<long long>(s.k), bf16, row, row_cutlass, row_fast, row_cutlass_fast,
                  cutlass, tiled);
    }
  }
  gemm.force_path(std::nullopt);
}

// Attention over `seqs` sequences of `ctx` cached tokens each, `n_new` of them
// new, over a bf16 or (fp8_kv) FP8 E4M3 cache. Returns the mean milliseconds;
// prints one row (prefixed by `path` when set).
double bench_attention(Backend& be, Timer& timer, cudaStream_t stream, int seqs, int ctx, int n_new,
                       const char* path = nullptr, bool fp8_kv = false) {
  const int heads = 32, kvh = 8, hd = 128, bs = 16;
  const int blocks_per_seq = (ctx + bs - 1) / bs;
  const int num_blocks = seqs * blocks_per_seq;
  const DType kv_type = fp8_kv ? DType::F8_E4M3 : DType::BF16;
  KvLayerCache cache{filled(be, kv_type, {num_blocks, bs, kvh, hd}, stream),
                     filled(be, kv_type, {num_blocks, bs, kvh, hd}, stream)};
  if (fp8_kv) {
    cache.k_scale = filled(be, DType::F32, {kvh}, stream);
    cache.v_scale = filled(be, DType::F32, {kvh}, stream);
  }
  AttentionMetadata meta;
  meta.num_seqs = seqs;
  meta.max_blocks_per_seq = blocks_per_seq;
  meta.query_start = {0};
  for (int s = 0; s < seqs; ++s) {
    meta.query_start.push_back(meta.query_start.back() + n_new);
    meta.context_lens.push_back(ctx);
    for (int b = 0; b < blocks_per_seq; ++b) meta.block_tables.push_back(s * blocks_per_seq + b);
    for (int p = ctx - n_new; p < ctx; ++p)
      meta.slot_mapping.push_back(int64_t{s} * blocks_per_seq * bs + p);
  }
  const int64_t t = int64_t{seqs} * n_new;
  Tensor q = filled(be, DType::BF16, {t, heads, hd}, stream);
  Tensor out = be.alloc(DType::BF16, {t, heads, hd});
  AttentionParams p;
  p.scale = 0.0883883f;
  const double ms = timer.ms([&] { be.paged_attention(q, cache, meta, p, out); });
  // Keys each query sees (causal), summed; bytes: each sequence's K/V once.
  double keys = 0;
  for (int j = 0; j < n_new; ++j) keys += ctx - n_new + j + 1;
  keys *= seqs;
  const double kv_bytes = 2.0 * (fp8_kv ? 1.0 : 2.0) * seqs * static_cast<double>(ctx) * kvh * hd;
  const double flops = 4.0 * keys * heads * hd;
  if (path)
    std::printf("%-10s %6d %6d %6d %10.3f %9.2f\n", path, seqs, ctx, n_new, ms, flops / ms / 1e9);
  else
    std::printf("%6d %6d %6d %10.1f %8.2f %9.2f\n", seqs, ctx, n_new, ms * 1e3,
                (kv_bytes + 4.0 * t * heads * hd) / ms / 1e9, flops / ms / 1e9);
  return ms;
}

// A decode step's caches and metadata: `seqs` sequences of `ctx` cached
// tokens (one new each), 8 kv heads of 128 dims, block 16, bf16 or FP8 KV.
// Small caches are repeated (at least 256 MB in all, at most 8 copies) and
// consecutive calls read different copies, so K and V come from HBM rather
// than the 50 MB L2. Any backend of the same device may time attention over
// them (the caches are filled and synchronised at construction).
struct DecodeCaches {
  int seqs, ctx;
  bool fp8;
  int kv_heads;  // of head_dim each: a cache slot holds kv_heads * head_dim values
  int head_dim;
  std::vector<KvLayerCache> copies;
  AttentionMetadata meta;
  static constexpr int kKvHeads = 8, kHeadDim = 128, kBlock = 16;

  DecodeCaches(Backend& be, cudaStream_t stream, int seqs_, int ctx_, bool fp8_,
               int kv_heads_ = kKvHeads, int head_dim_ = kHeadDim)
      : seqs(seqs_), ctx(ctx_), fp8(fp8_), kv_heads(kv_heads_), head_dim(head_dim_) {
    const int blocks_per_seq = (ctx + kBlock - 1) / kBlock;
    const int64_t num_blocks = int64_t{seqs} * blocks_per_seq;
    const DType kv_type = fp8 ? DType::F8_E4M3 : DType::BF16;
    const int n = static_cast<int>(std::min(8.0, std::max(1.0, std::ceil(256e6 / kv_bytes()))));
    for (int i = 0; i < n; ++i) {
      KvLayerCache c{filled(be, kv_type, {num_blocks, kBlock, kv_heads, head_dim}, stream),
                     filled(be, kv_type, {num_blocks, kBlock, kv_heads, head_dim}, stream)};
      if (fp8) {
        c.k_scale = filled(be, DType::F32, {kv_heads}, stream);
        c.v_scale = filled(be, DType::F32, {kv_heads}, stream);
      }
      copies.push_back(std::move(c));
    }
    meta.num_seqs = seqs;
    meta.max_blocks_per_seq = blocks_per_seq;
    meta.query_start = {0};
    for (int s = 0; s < seqs; ++s) {
      meta.query_start.push_back(s + 1);
      meta.context_lens.push_back(ctx);
      for (int b = 0; b < blocks_per_seq; ++b) meta.block_tables.push_back(s * blocks_per_seq + b);
      meta.slot_mapping.push_back(int64_t{s} * blocks_per_seq * kBlock + ctx - 1);
    }
    cudaStreamSynchronize(stream);
  }

  // Bytes of K and V one call reads.
  double kv_bytes() const {
    return 2.0 * (fp8 ? 1.0 : 2.0) * seqs * static_cast<double>(ctx) * kv_heads * head_dim;
  }

  // K and V read once, plus q and out (bf16), for `heads` query heads.
  double bytes(int heads) const { return kv_bytes() + 4.0 * seqs * heads * head_dim; }

  // Mean milliseconds of `be`'s attention for `heads` query heads, as decode
  // steps run it: `iters` calls recorded in a CUDA graph (launch gaps of a
  // few microseconds would otherwise hide the short kernels' speed), the
  // graph replayed 3 times after a warm-up.
  double ms(Backend& be, cudaStream_t stream, int heads, int iters) {
    Tensor q = filled(be, DType::BF16, {seqs, heads, head_dim}, stream);
    Tensor out = be.alloc(DType::BF16, {seqs, heads, head_dim});
    AttentionParams p;
    p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    const size_t n = copies.size();
    for (size_t i = 0; i < 3; ++i) be.paged_attention(q, copies[i % n], meta, p, out);
    be.begin_capture();
    for (int i = 0; i < iters; ++i)
      be.paged_attention(q, copies[static_cast<size_t>(i) % n], meta, p, out);
    std::unique_ptr<StepGraph> graph = be.end_capture();
    be.replay(*graph);
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventRecord(start, stream);
    for (int r = 0; r < 3; ++r) be.replay(*graph);
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float t = 0;
    cudaEventElapsedTime(&t, start, stop);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return static_cast<double>(t) / (3.0 * iters);
  }
};

// Decode attention, one layer, over (seqs, ctx) shapes: GQA 4 (32 q / 8 kv
// heads) and, with gqa8, 8 (64 / 8), bf16 and FP8 KV (selected by kvs).
void bench_decode_table(Backend& be, Timer& timer, cudaStream_t stream, const char* title,
                        std::initializer_list<bool> kvs, std::initializer_list<int> ctxs,
                        std::initializer_list<int> batches, bool gqa8) {
  std::printf(
      "\n== %s (8 kv heads, head_dim 128, block 16; one layer) ==\n"
      "TB/s = (K + V read + q + out) / time; tok/s = sequences / time (one layer's attention);\n"
      "timed in a CUDA graph of calls, as decode steps run\n"
      "%-5s %7s %5s %7s %10s %8s %12s\n",
      title, "kv", "q/kv", "seqs", "ctx", "us", "TB/s", "tok/s");
  for (bool fp8 : kvs)
    for (int ctx : ctxs)
      for (int seqs : batches) {
        DecodeCaches c(be, stream, seqs, ctx, fp8);
        for (int heads : {32, 64}) {
          if (heads == 64 && !gqa8) continue;
          const double ms = c.ms(be, stream, heads, timer.iters);
          std::printf("%-5s %4d/%-2d %5d %7d %10.1f %8.2f %12.0f\n", fp8 ? "fp8" : "bf16", heads,
                      DecodeCaches::kKvHeads, seqs, ctx, ms * 1e3, c.bytes(heads) / ms / 1e9,
                      seqs / ms * 1e3);
        }
      }
}

// Long-context decode attention: contexts 8k-128k, batch 1-64, GQA 4 and 8
// (the largest, 64 x 128k bf16, is 34 GB of K and V); then large batches at
// the contexts of offline runs (512 x 1,000 in / 1,000 out ends at 2k).
void bench_long_decode(Backend& be, Timer& timer, cudaStream_t stream) {
  bench_decode_table(be, timer, stream, "long-context decode attention", {false, true},
                     {8192, 32768, 131072}, {1, 16, 64}, true);
  bench_decode_table(be, timer, stream, "batched decode attention", {false, true}, {1024, 2048},
                     {128, 256, 512}, false);
}

// The decode split's knobs (LOOM_ATTN_PARTITION_KEYS, LOOM_ATTN_BLOCKS_PER_SM,
// LOOM_ATTN_HEADS_PER_BLOCK) swept over a few long-context shapes: one
// backend per setting (each reads the variables once), the same caches for
// all. One row per setting, TB/s per shape; then the best setting per shape.
void bench_attention_sweep(Backend& be, cudaStream_t stream, int iters) {
  struct Shape {
    int seqs, ctx, heads;
    bool fp8;
  };
  const Shape shapes[] = {{1, 8192, 32, false},    {1, 8192, 64, false},   {1, 32768, 32, false},
                          {1, 32768, 64, false},   {16, 32768, 32, false}, {16, 32768, 64, false},
                          {64, 8192, 32, false},   {64, 8192, 64, false},  {1, 131072, 32, false},
                          {16, 131072, 64, false}, {1, 32768, 32, true},   {1, 32768, 64, true},
                          {16, 32768, 32, true},   {16, 32768, 64, true}};
  std::vector<std::unique_ptr<DecodeCaches>> caches;
  std::vector<DecodeCaches*> of_shape;
  for (const Shape& s : shapes) {
    DecodeCaches* found = nullptr;
    for (auto& c : caches)
      if (c->seqs == s.seqs && c->ctx == s.ctx && c->fp8 == s.fp8) found = c.get();
    if (!found) {
      caches.push_back(std::make_unique<DecodeCaches>(be, stream, s.seqs, s.ctx, s.fp8));
      found = caches.back().get();
    }
    of_shape.push_back(found);
  }
  std::printf(
      "\n== decode attention split sweep (TB/s; shape = seqs x ctx / q heads per kv head, kv type) "
      "==\n");
  std::printf("%6s %4s %4s", "P", "B", "H");
  for (const Shape& s : shapes) {
    char name[32];
    std::snprintf(name, sizeof name, "%dx%dk/%d%s", s.seqs, s.ctx / 1024,
                  s.heads / DecodeCaches::kKvHeads, s.fp8 ? "f8" : "");
    std::printf(" %11s", name);
  }
  std::printf("\n");
  constexpr size_t kShapes = std::size(shapes);
  std::vector<double> best(kShapes, 0);
  std::vector<std::string> best_at(kShapes);
  for (int heads_per_block : {8, 4})
    for (int per_sm : {0, 2, 4, 8})
      for (int partition : {256, 512, 1024, 2048, 4096}) {
        ::setenv("LOOM_ATTN_PARTITION_KEYS", std::to_string(partition).c_str(), 1);
        ::setenv("LOOM_ATTN_BLOCKS_PER_SM", std::to_string(per_sm).c_str(), 1);
        ::setenv("LOOM_ATTN_HEADS_PER_BLOCK", std::to_string(heads_per_block).c_str(), 1);
        auto tuned = make_cuda_backend(0);
        auto tuned_stream = static_cast<cudaStream_t>(cuda_backend_stream(*tuned));
        std::printf("%6d %4d %4d", partition, per_sm, heads_per_block);
        for (size_t i = 0; i < kShapes; ++i) {
          const double ms = of_shape[i]->ms(*tuned, tuned_stream, shapes[i].heads, iters);
          const double tbs = of_shape[i]->bytes(shapes[i].heads) / ms / 1e9;
          std::printf(" %11.2f", tbs);
          if (tbs > best[i]) {
            best[i] = tbs;
            best_at[i] = std::to_string(partition) + "/" + std::to_string(per_sm) + "/" +
                         std::to_string(heads_per_block);
          }
        }
        std::printf("\n");
      }
  ::unsetenv("LOOM_ATTN_PARTITION_KEYS");
  ::unsetenv("LOOM_ATTN_BLOCKS_PER_SM");
  ::unsetenv("LOOM_ATTN_HEADS_PER_BLOCK");
  std::printf("%-16s", "best TB/s");
  for (size_t i = 0; i < kShapes; ++i) std::printf(" %11.2f", best[i]);
  std::printf("\n%-16s", "at P/B/H");
  for (size_t i = 0; i < kShapes; ++i) std::printf(" %11s", best_at[i].c_str());
  std::printf(
      "\nP: LOOM_ATTN_PARTITION_KEYS, B: LOOM_ATTN_BLOCKS_PER_SM (0: occupancy), H: "
      "LOOM_ATTN_HEADS_PER_BLOCK\n");
}

// Prefill steps through the flash kernel (`be`, unless LOOM_FLASH_PREFILL=0
// is set) and through the CUDA-core kernel (`old`, made with
// LOOM_FLASH_PREFILL=0).
void bench_prefill_attention(Backend& be, Timer& timer, cudaStream_t stream, Backend& old,
                             Timer& old_timer, cudaStream_t old_stream) {
  std::printf(
      "\n== prefill attention (32 q / 8 kv heads, head_dim 128, block 16): flash vs CUDA-core "
      "==\n");
  std::printf("TFLOP/s = 4 * sum over queries of keys seen * head_dim * heads / time\n");
  std::printf("%-10s %6s %6s %6s %10s %9s\n", "path", "seqs", "ctx", "new", "ms", "TFLOP/s");
  struct Row {
    int seqs, ctx, n_new;
  };
  for (Row r :
       {Row{1, 512, 512}, {4, 2048, 2048}, {8, 2048, 1024}, {16, 1024, 1024}, {8, 1024, 256}}) {
    const double f = bench_attention(be, timer, stream, r.seqs, r.ctx, r.n_new, "flash");
    const double c =
        bench_attention(old, old_timer, old_stream, r.seqs, r.ctx, r.n_new, "cuda-core");
    std::printf("%-10s %.2fx\n", "speedup", c / f);
  }
}

void bench_small_ops(Backend& be, Timer& timer, cudaStream_t stream) {
  std::printf("\n== row and elementwise ops (T = 256 tokens) ==\n%-16s %10s %8s\n", "op", "us",
              "TB/s");
  const int64_t t = 256, h = 4096, inter = 14336;
  Tensor x = filled(be, DType::BF16, {t, h}, stream), res = filled(be, DType::BF16, {t, h}, stream);
  Tensor out = be.alloc(DType::BF16, {t, h}), w = be.alloc(DType::F32, {h});
  auto row = [&](const char* name, double bytes, const std::function<void()>& fn) {
    const double ms = timer.ms(fn);
    std::printf("%-16s %10.2f %8.2f\n", name, ms * 1e3, bytes / ms / 1e9);
  };
  row("rms_norm", 4.0 * t * h, [&] { be.rms_norm(x, w, 1e-5f, 0.0f, out); });
  row("add_rms_norm", 8.0 * t * h, [&] { be.add_rms_norm(x, res, w, 1e-5f, 0.0f, out); });
  Tensor g = filled(be, DType::BF16, {t, inter}, stream),
         u = filled(be, DType::BF16, {t, inter}, stream);
  Tensor a = be.alloc(DType::BF16, {t, inter});
  row("silu_mul", 6.0 * t * inter, [&] { be.gated_activation(g, u, GatedActivation::Silu, a); });
  // The forms that also write their rows quantised for an FP8 layer next
  // (add_rms_norm before qkv / gate_up, the activation before down), at a
  // decode row and a batch's rows. Bytes: x, residual in and out, out, q.
  {
    const int64_t kRows = 512;
    Tensor bx = filled(be, DType::BF16, {kRows, h}, stream),
           bres = filled(be, DType::BF16, {kRows, h}, stream);
    Tensor bout = be.alloc(DType::BF16, {kRows, h}), bw = filled(be, DType::F32, {h}, stream);
    Tensor gu = filled(be, DType::BF16, {kRows, 2 * inter}, stream);
    Tensor act = be.alloc(DType::BF16, {kRows, inter});
    Tensor q = be.alloc(DType::F8_E4M3, {kRows, inter}), qs = be.alloc(DType::F32, {kRows});
    const cuda::Fp8RowsOut rows_out{q.data_as<uint8_t>(), qs.data_as<float>(), nullptr};
    for (int64_t rows : {int64_t{1}, kRows}) {
      char name[40];
      std::snprintf(name, sizeof name, "add_rms+fp8 %lld", static_cast<long long>(rows));
      row(name, 9.0 * rows * h, [&] {
        cuda::rms_norm_bf16(bx.data(), bres.data(), bw.data(), DType::F32, 0.0f, 1e-5f, bout.data(),
                            rows, h, stream, &rows_out);
      });
      std::snprintf(name, sizeof name, "silu_mul+fp8 %lld", static_cast<long long>(rows));
      row(name, 7.0 * rows * inter, [&] {
        cuda::gated_activation_fused_bf16(gu.data(), act.data(), rows, inter, false, stream,
                                          &rows_out);
      });
    }
  }
  Tensor qk = filled(be, DType::BF16, {t, 40, 128}, stream);
  std::vector<int32_t> pos(t);
  for (int64_t i = 0; i < t; ++i) pos[i] = static_cast<int32_t>(i * 7);
  Tensor pt = be.alloc(DType::I32, {t});
  be.copy_from_host(pt, pos.data(), pos.size() * 4);
  Tensor freq = be.alloc(DType::F32, {64});
  row("rope (q+k)", 4.0 * t * 40 * 128, [&] { be.rope(qk, pt, freq, 128, false, 1.0f); });
  Tensor table = filled(be, DType::BF16, {128256, h}, stream);
  row("embedding", 4.0 * t * h, [&] { be.embedding(table, pt, 1.0f, out); });
}

// Greedy token choice per step, host wall time: argmax_rows on the device
// (ids copied back) against the full logits copy + f32 conversion the host
// sampler needs.
void bench_sampling(Backend& be, int iters, cudaStream_t stream) {
  std::printf(
      "\n== greedy tokens of a step (vocab 128256, bf16 logits; host wall time) ==\n%6s %14s "
      "%18s\n",
      "rows", "argmax_rows us", "copy_to_host_f32 us");
  std::vector<int32_t> ids;
  std::vector<float> host;
  auto wall_us = [&](const std::function<void()>& fn) {
    fn();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) fn();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
               .count() /
           iters;
  };
  for (int64_t rows : {1, 64, 256}) {
    Tensor logits = filled(be, DType::BF16, {rows, 128256}, stream);
    const double a = wall_us([&] { be.argmax_rows(logits, ids); });
    const double c = wall_us([&] { copy_to_host_f32(be, logits, host); });
    std::printf("%6lld %14.1f %18.1f\n", static_cast<long long>(rows), a, c);
  }
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) {
  using namespace loom;
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  if (!cuda_device_available()) {
    std::printf("no CUDA device visible: nothing to measure\n");
    return 0;
  }
  const bool sweep = argc > 1 && std::strcmp(argv[1], "--attn-sweep") == 0;
  if (argc > 4 && std::strcmp(argv[1], "--decode-attn") == 0) {
    // One decode attention shape (for profilers): SEQS CTX bf16|fp8
    // [iterations] [kv heads, 8 by default; 4 query heads each]. One kv head
    // puts a block's 16 slots of it in one contiguous run (what a cache laid
    // out head-major per block would read).
    auto be = make_cuda_backend(0);
    auto stream = static_cast<cudaStream_t>(cuda_backend_stream(*be));
    const int seqs = std::atoi(argv[2]), ctx = std::atoi(argv[3]);
    const bool fp8 = std::strcmp(argv[4], "fp8") == 0;
    const int n = argc > 5 ? std::max(1, std::atoi(argv[5])) : 20;
    const int kv = argc > 6 ? std::atoi(argv[6]) : DecodeCaches::kKvHeads;
    const int hd = argc > 7 ? std::atoi(argv[7]) : DecodeCaches::kHeadDim;
    const int group = argc > 8 ? std::atoi(argv[8]) : 4;
    if (seqs < 1 || ctx < 1 || kv < 1 || kv > 64 || hd < 8 || hd > 256 || hd % 8 != 0 ||
        group < 1 || group > 16) {
      std::printf(
          "--decode-attn SEQS CTX bf16|fp8 [iterations] [kv heads 1-64] [head_dim 8-256, a "
          "multiple "
          "of 8] [query heads per kv head 1-16]\n");
      return 2;
    }
    DecodeCaches c(*be, stream, seqs, ctx, fp8, kv, hd);
    const double ms = c.ms(*be, stream, group * kv, n);
    std::printf("decode attention %s %d/%d heads of %d, %d seqs x %d ctx: %.1f us, %.2f TB/s\n",
                fp8 ? "fp8" : "bf16", group * kv, kv, hd, seqs, ctx, ms * 1e3,
                c.bytes(group * kv) / ms / 1e9);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--read-pattern") == 0) {
    bench_read_patterns(argc > 2 ? std::max(1, std::atoi(argv[2])) : 20);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--gemm-host") == 0) {
    auto be = make_cuda_backend(0);
    bench_matmul_host(*be, static_cast<cudaStream_t>(cuda_backend_stream(*be)));
    return 0;
  }
  const bool matmul_only = argc > 1 && std::strcmp(argv[1], "--matmul") == 0;
  const bool tiles_only = argc > 1 && std::strcmp(argv[1], "--fp8-tiles") == 0;
  const bool small_only = argc > 1 && std::strcmp(argv[1], "--small-ops") == 0;
  const int iters_arg = sweep || matmul_only || tiles_only || small_only ? 2 : 1;
  const int iters = argc > iters_arg ? std::atoi(argv[iters_arg]) : 20;
  auto be = make_cuda_backend(0);
  auto stream = static_cast<cudaStream_t>(cuda_backend_stream(*be));
  Timer timer{stream, iters > 0 ? iters : 20};
  std::printf("%s, %d iterations per figure\n", be->name().c_str(), timer.iters);
  if (sweep) {
    bench_attention_sweep(*be, stream, timer.iters);
    return 0;
  }
  if (tiles_only) {
    bench_fp8_tiles(*be, timer, stream);
    return 0;
  }
  if (small_only) {
    bench_small_ops(*be, timer, stream);
    return 0;
  }
  bench_matmul(*be, timer, stream, "GEMV up to 2 rows, then cuBLASLt", {1, 2, 4, 8, 64, 256, 1024});
  {
    ::setenv("LOOM_GEMV", "0", 1);
    auto blas = make_cuda_backend(0);
    ::unsetenv("LOOM_GEMV");
    auto blas_stream = static_cast<cudaStream_t>(cuda_backend_stream(*blas));
    Timer blas_timer{blas_stream, timer.iters};
    bench_matmul(*blas, blas_timer, blas_stream, "cuBLASLt only (LOOM_GEMV=0)", {1, 2, 4});
  }
  bench_fp8_matmul(*be, timer, stream);
  bench_fp8_block_gemm(*be, timer, stream);
  if (matmul_only) return 0;
  std::printf("\n== paged attention (32 q / 8 kv heads, head_dim 128, block 16, bf16 KV) ==\n");
  std::printf("%6s %6s %6s %10s %8s %9s\n", "seqs", "ctx", "new", "us", "TB/s", "TFLOP/s");
  for (auto [seqs, ctx] :
       {std::pair{64, 1024}, {1, 1024}, {1, 8192}, {16, 4096}, {256, 512}, {256, 1024}})
    bench_attention(*be, timer, stream, seqs, ctx, 1);
  std::printf("\n== paged attention, FP8 E4M3 KV (same shapes) ==\n");
  std::printf("%6s %6s %6s %10s %8s %9s\n", "seqs", "ctx", "new", "us", "TB/s", "TFLOP/s");
  for (auto [seqs, ctx] :
       {std::pair{64, 1024}, {1, 1024}, {1, 8192}, {16, 4096}, {256, 512}, {256, 1024}})
    bench_attention(*be, timer, stream, seqs, ctx, 1, nullptr, true);
  bench_long_decode(*be, timer, stream);
  std::printf("\n== prefill attention, FP8 E4M3 KV (flash) ==\n%-10s %6s %6s %6s %10s %9s\n",
              "path", "seqs", "ctx", "new", "ms", "TFLOP/s");
  for (auto [seqs, ctx] : {std::pair{1, 512}, {4, 2048}, {16, 1024}})
    bench_attention(*be, timer, stream, seqs, ctx, ctx, "flash fp8", true);
  {
    ::setenv("LOOM_FLASH_PREFILL", "0", 1);
    auto old = make_cuda_backend(0);
    ::unsetenv("LOOM_FLASH_PREFILL");
    auto old_stream = static_cast<cudaStream_t>(cuda_backend_stream(*old));
    Timer old_timer{old_stream, timer.iters};
    bench_prefill_attention(*be, timer, stream, *old, old_timer, old_stream);
  }
  bench_small_ops(*be, timer, stream);
  bench_sampling(*be, timer.iters, stream);
  return 0;
}
