// Timing of the CPU kernels (not a correctness test; disabled by default).
// Prints achieved weight bandwidth (GB/s) for decode-shaped matvecs and
// throughput for prefill-shaped matmuls and decode attention, for each ISA.
// Run: build/backend/tests/test_perf_matmul --gtest_also_run_disabled_tests
// (LOOM_PERF_THREADS=N to change the thread count, default 2).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "reference.h"

namespace loom {
namespace {

int perf_threads() {
  const char* env = std::getenv("LOOM_PERF_THREADS");
  return env ? std::atoi(env) : 2;
}

// A [n, k] weight of random blocks with valid, small f16 scales (quantising a
// 150M-value matrix would take longer than the measurement).
Tensor random_weight(DType t, int64_t n, int64_t k) {
  Tensor w = Tensor::cpu(t, {n, k});
  auto* p = static_cast<uint8_t*>(w.data());
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (int64_t i = 0; i < w.nbytes(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = static_cast<uint8_t>(s >> 56);
  }
  const DTypeInfo& info = dtype_info(t);
  const uint16_t small = f32_to_f16(0.01f);
  auto* u16 = reinterpret_cast<uint16_t*>(p);
  if (t == DType::F16 || t == DType::BF16) {
    const uint16_t v = t == DType::F16 ? small : f32_to_bf16(0.01f);
    for (int64_t i = 0; i < w.numel(); ++i) u16[i] = v;
  } else if (t == DType::F32) {
    for (int64_t i = 0; i < w.numel(); ++i) reinterpret_cast<float*>(p)[i] = 0.01f;
  } else {
    const int64_t blocks = w.nbytes() / info.block_bytes;
    for (int64_t b = 0; b < blocks; ++b) {
      uint8_t* blk = p + b * info.block_bytes;
      if (t == DType::Q6_K) {
        std::memcpy(blk + 208, &small, 2);
      } else {
        std::memcpy(blk, &small, 2);
        if (t == DType::Q4_K || t == DType::Q5_K || t == DType::Q4_1 || t == DType::Q5_1)
          std::memcpy(blk + 2, &small, 2);
      }
    }
  }
  return w;
}

// The best time of one call over `budget` seconds (the machine is shared, so
// the minimum is the number least disturbed by other processes). With
// LOOM_PERF_CPU_TIME=1 the time is the process's CPU time instead of wall time:
// on a crowded machine a long call cannot escape being descheduled, but its CPU
// time stays what the work costs (meaningful with LOOM_PERF_THREADS=1).
template <class Fn>
double seconds_per_call(Fn&& fn, double budget = 0.5) {
  static const bool cpu_time = [] {
    const char* env = std::getenv("LOOM_PERF_CPU_TIME");
    return env && std::string(env) == "1";
  }();
  auto now = [] {
    if (!cpu_time)
      return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  fn();  // warm up
  double best = 1e30, total = 0;
  int calls = 0;
  while (total < budget || calls < 3) {
    const double t0 = now();
    fn();
    const double el = now() - t0;
    best = std::min(best, el);
    total += el;
    ++calls;
  }
  return best;
}

// x . w^T timed (0.3 s budget) under every ISA, for the weight as stored and,
// where the backend interleaves its type, as prepared: report(w, isa, seconds).
template <class Be, class Report>
void time_stored_and_prepared(Be& be, const Tensor& stored, const Tensor& x, Tensor& out,
                              Report&& report) {
  std::vector<Tensor> forms;
  forms.reserve(2);
  forms.push_back(stored);
  if (Tensor p = be.prepare_weight(stored); p.dtype() != stored.dtype()) forms.push_back(p);
  for (const Tensor& w : forms)
    ref::for_each_isa([&](cpu::Isa isa) {
      report(w, isa, seconds_per_call([&] { be.matmul(x, w, nullptr, out); }, 0.3));
    });
}

TEST(Perf, DISABLED_MemoryBandwidth) {
  // Reference point: a plain parallel streaming read of 256 MiB.
  const int64_t n = 64ll << 20;
  std::vector<float> buf(static_cast<size_t>(n), 1.0f);
  ThreadPool pool(perf_threads());
  std::vector<double> sums(64);
  const double s = seconds_per_call([&] {
    pool.parallel_for(
        perf_threads(),
        [&](int64_t b, int64_t e) {
          for (int64_t t = b; t < e; ++t) {
            const int64_t lo = n * t / perf_threads(), hi = n * (t + 1) / perf_threads();
            const auto* u = reinterpret_cast<const uint32_t*>(buf.data());
            uint32_t acc = 0;  // integer xor: vectorises, so memory is the limit
            for (int64_t i = lo; i < hi; ++i) acc ^= u[i];
            sums[t * 8] = acc;
          }
        },
        1);
  });
  std::printf("stream read, %d threads: %.1f GB/s\n", perf_threads(), n * 4.0 / s / 1e9);
}

TEST(Perf, DISABLED_ParallelForOverhead) {
  // Mean cost of back-to-back parallel_for calls with (almost) no work: what a
  // decode step pays ~200 times on top of its kernels.
  ThreadPool pool(perf_threads());
  std::vector<int64_t> sink(64 * 16);
  for (int64_t n : {int64_t{1} * perf_threads(), int64_t{64}}) {
    const int calls = 20000;
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int c = 0; c < calls; ++c)
        pool.parallel_for(n, [&](int64_t b, int64_t e) { sink[static_cast<size_t>(b) * 16] += e; });
      best = std::min(
          best,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls);
    }
    std::printf("parallel_for n=%-3ld %d threads: %6.2f us per call (best of 5 x %d)\n",
                static_cast<long>(n), perf_threads(), best * 1e6, calls);
  }
}

TEST(Perf, DISABLED_Matvec) {
  auto be = make_cpu_backend(perf_threads());
  struct Shape {
    DType t;
    int64_t n, k;
  };
  const Shape shapes[] = {
      {DType::Q4_K, 896, 4864},   {DType::Q5_K, 896, 4864},    {DType::Q6_K, 896, 4864},
      {DType::Q8_0, 896, 4864},   {DType::Q4_0, 896, 4864},    {DType::F16, 896, 4864},
      {DType::BF16, 896, 4864},   {DType::F32, 896, 4864},     {DType::Q8_0, 4864, 896},
      {DType::Q8_0, 151936, 896}, {DType::Q6_K, 151936, 1024}, {DType::Q4_K, 151936, 1024},
      {DType::Q5_0, 896, 4864},   {DType::Q4_1, 896, 4864},    {DType::Q5_1, 896, 4864},
      {DType::Q5_0, 151936, 896},
  };
  std::printf("%s\n", be->name().c_str());
  for (const Shape& sh : shapes) {
    const Tensor stored = random_weight(sh.t, sh.n, sh.k);
    Tensor x = ref::f32_tensor(ref::random_floats(sh.k, 1), {1, sh.k});
    Tensor out = Tensor::cpu(DType::F32, {1, sh.n});
    time_stored_and_prepared(*be, stored, x, out, [&](const Tensor& w, cpu::Isa isa, double s) {
      std::printf("matvec %-7s N=%-6ld K=%-5ld %-8s %8.1f us  %6.1f GB/s\n",
                  std::string(dtype_name(w.dtype())).c_str(), static_cast<long>(sh.n),
                  static_cast<long>(sh.k), std::string(cpu::isa_name(isa)).c_str(), s * 1e6,
                  w.nbytes() / s / 1e9);
    });
  }
}

TEST(Perf, DISABLED_DecodeWeightStream) {
  // One decode step's matvecs of a Qwen2.5-0.5B Q5_0 GGUF (24 layers of
  // q/k/v/o/gate/up/down, then the 151936-row output head): ~340 MB of weights,
  // more than the caches hold, so this is the DRAM-streaming case that
  // dominates single-stream decode. Mean over a few steps (each is cold).
  auto be = make_cpu_backend(perf_threads());
  struct Mat {
    DType t;
    int64_t n, k;
  };
  std::vector<Mat> step;
  for (int layer = 0; layer < 24; ++layer) {
    const DType down = layer % 2 ? DType::Q4_K : DType::Q6_K;
    for (const Mat& m :
         {Mat{DType::Q5_0, 896, 896}, Mat{DType::Q5_0, 128, 896}, Mat{DType::Q8_0, 128, 896},
          Mat{DType::Q5_0, 896, 896}, Mat{DType::Q5_0, 4864, 896}, Mat{DType::Q5_0, 4864, 896},
          Mat{down, 896, 4864}})
      step.push_back(m);
  }
  step.push_back({DType::Q8_0, 151936, 896});
  std::vector<Tensor> ws;
  double bytes = 0;
  for (const Mat& m : step) {
    ws.push_back(random_weight(m.t, m.n, m.k));
    bytes += static_cast<double>(ws.back().nbytes());
  }
  Tensor x896 = ref::f32_tensor(ref::random_floats(896, 1), {1, 896});
  Tensor x4864 = ref::f32_tensor(ref::random_floats(4864, 2), {1, 4864});
  std::vector<Tensor> outs;
  for (const Mat& m : step) outs.push_back(Tensor::cpu(DType::F32, {1, m.n}));
  // As the backend prepares them (Q8_0 / Q5_0 / K-quants interleaved by 16 rows), then as
  // stored in the file.
  std::vector<Tensor> prepared;
  for (const Tensor& w : ws) prepared.push_back(be->prepare_weight(w));
  for (const auto* weights : {&prepared, &ws})
    ref::for_each_isa([&](cpu::Isa isa) {
      if (isa == cpu::Isa::Portable) return;
      auto one_step = [&] {
        for (size_t i = 0; i < step.size(); ++i)
          be->matmul(step[i].k == 896 ? x896 : x4864, (*weights)[i], nullptr, outs[i]);
      };
      one_step();
      const int steps = 8;
      const auto t0 = std::chrono::steady_clock::now();
      const std::clock_t c0 = std::clock();
      for (int s = 0; s < steps; ++s) one_step();
      const double sec =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
      const double cpu_sec = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC / steps;
      std::printf(
          "decode weight stream %-8s %-11s %.0f MB: %7.2f ms per step  %5.1f GB/s  (%d threads, "
          "%.2f cores busy)\n",
          std::string(cpu::isa_name(isa)).c_str(), weights == &ws ? "as stored" : "interleaved",
          bytes / 1e6, sec * 1e3, bytes / sec / 1e9, perf_threads(), cpu_sec / sec);
    });
}

TEST(Perf, DISABLED_Prefill) {
  auto be = make_cpu_backend(perf_threads());
  for (DType t : {DType::Q4_K, DType::Q6_K, DType::Q8_0, DType::Q5_0, DType::F16, DType::F32}) {
    const int64_t m = 64, n = 896, k = 4864;
    const Tensor stored = random_weight(t, n, k);
    Tensor x = ref::f32_tensor(ref::random_floats(m * k, 1), {m, k});
    Tensor out = Tensor::cpu(DType::F32, {m, n});
    time_stored_and_prepared(*be, stored, x, out, [&](const Tensor& w, cpu::Isa isa, double s) {
      std::printf("matmul %-7s M=%ld N=%ld K=%ld %-8s %8.2f ms  %6.1f GFLOP/s\n",
                  std::string(dtype_name(w.dtype())).c_str(), static_cast<long>(m),
                  static_cast<long>(n), static_cast<long>(k),
                  std::string(cpu::isa_name(isa)).c_str(), s * 1e3, 2.0 * m * n * k / s / 1e9);
    });
  }
}

TEST(Perf, DISABLED_MatmulByRows) {
  // Batched decode and short prompts: time per call and per row as M grows,
  // across the switch from row dot products (M < 4) to the GEMM.
  auto be = make_cpu_backend(perf_threads());
  // A Qwen2.5-0.5B layer's up and down projections and its output head.
  struct Shape {
    DType t;
    int64_t n, k;
  };
  for (const Shape& sh : {Shape{DType::Q5_0, 4864, 896}, Shape{DType::Q6_K, 896, 4864},
                          Shape{DType::Q4_K, 896, 4864}, Shape{DType::Q8_0, 151936, 896},
                          Shape{DType::F16, 4864, 896}, Shape{DType::BF16, 4864, 896}}) {
    const DType t = sh.t;
    const int64_t n = sh.n, k = sh.k;
    // As the backend prepares it (interleaved, as the engine runs it).
    Tensor w = be->prepare_weight(random_weight(t, n, k));
    for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 64}) {
      Tensor x = ref::f32_tensor(ref::random_floats(m * k, 1), {m, k});
      Tensor out = Tensor::cpu(DType::F32, {m, n});
      const double s = seconds_per_call([&] { be->matmul(x, w, nullptr, out); }, 0.3);
      std::printf("matmul %-8s M=%-3ld N=%-6ld K=%ld %-8s %8.3f ms  %7.3f ms/row  %6.1f GFLOP/s\n",
                  std::string(dtype_name(w.dtype())).c_str(), static_cast<long>(m),
                  static_cast<long>(n),
                  static_cast<long>(k), std::string(cpu::isa_name(cpu::active_isa())).c_str(),
                  s * 1e3, s * 1e3 / static_cast<double>(m), 2.0 * m * n * k / s / 1e9);
    }
  }
}

TEST(Perf, DISABLED_DecodeAttention) {
  auto be = make_cpu_backend(perf_threads());
  // Qwen2.5-0.5B-like layer: 14 heads over 2 kv heads, head_dim 64; 8 sequences
  // decoding one token each over 1024 cached tokens, f32 and bf16 caches.
  const int heads = 14, kvh = 2, hd = 64, bs = 16, ctx = 1024, ns = 8;
  for (DType ct : {DType::F32, DType::F16, DType::BF16}) {
    const int blocks_per = ctx / bs;
    KvLayerCache cache{
        random_weight(ct, ns * blocks_per * bs * kvh, hd).reshape({ns * blocks_per, bs, kvh, hd}),
        random_weight(ct, ns * blocks_per * bs * kvh, hd).reshape({ns * blocks_per, bs, kvh, hd})};
    AttentionMetadata meta;
    meta.num_seqs = ns;
    meta.max_blocks_per_seq = blocks_per;
    for (int s = 0; s <= ns; ++s) meta.query_start.push_back(s);
    for (int s = 0; s < ns; ++s) {
      meta.context_lens.push_back(ctx);
      for (int b = 0; b < blocks_per; ++b) meta.block_tables.push_back(s * blocks_per + b);
    }
    Tensor q = ref::f32_tensor(ref::random_floats(ns * heads * hd, 3), {ns, heads, hd});
    Tensor out = Tensor::cpu(DType::F32, {ns, heads, hd});
    AttentionParams p;
    p.scale = 0.125f;
    ref::for_each_isa([&](cpu::Isa isa) {
      const double s = seconds_per_call([&] { be->paged_attention(q, cache, meta, p, out); }, 0.3);
      std::printf("decode attention %-4s %d seqs x %d ctx %-8s %8.1f us  %6.1f GB/s of KV\n",
                  std::string(dtype_name(ct)).c_str(), ns, ctx,
                  std::string(cpu::isa_name(isa)).c_str(), s * 1e6,
                  2.0 * cache.k.nbytes() / s / 1e9);
    });
  }
}

TEST(Perf, DISABLED_DecodeAttentionOneSequence) {
  // Decode as the engine runs it: by default one sequence of 544 cached
  // tokens on a Qwen2.5-0.5B-like layer (14 heads over 2 kv heads, head_dim
  // 64), with the caches evicted before each call (in a decode step a layer's
  // KV is read after the previous layers' weights went through the cache) and
  // hot (the same call repeated).
  auto be = make_cpu_backend(perf_threads());
  // LOOM_PERF_ATTN="seqs,ctx" changes the shape (default 1 sequence of 544).
  int ns = 1, ctx = 544;
  if (const char* e = std::getenv("LOOM_PERF_ATTN")) std::sscanf(e, "%d,%d", &ns, &ctx);
  const int heads = 14, kvh = 2, hd = 64, bs = 16, pool_blocks = 2730;
  std::vector<char> evict(64 << 20, 1);
  volatile int sink = 0;
  Tensor wake_x = ref::f32_tensor(ref::random_floats(64, 1), {1, 64});
  Tensor wake_w = ref::f32_tensor(ref::random_floats(64 * 64, 2), {64, 64});
  Tensor wake_out = Tensor::cpu(DType::F32, {1, 64});
  for (DType ct : {DType::F32, DType::F16}) {
    const int blocks_per = (ctx + bs - 1) / bs;
    ASSERT_LE(ns * blocks_per, 2000) << "the pool holds 2,730 blocks";
    KvLayerCache cache;
    cache.k = random_weight(ct, pool_blocks * bs * kvh, hd).reshape({pool_blocks, bs, kvh, hd});
    cache.v = random_weight(ct, pool_blocks * bs * kvh, hd).reshape({pool_blocks, bs, kvh, hd});
    AttentionMetadata meta;
    meta.num_seqs = ns;
    meta.max_blocks_per_seq = blocks_per;
    // Blocks in order, reversed or scattered over the pool.
    const char* order = std::getenv("LOOM_PERF_BLOCK_ORDER");
    for (int s = 0; s < ns; ++s) {
      meta.query_start.push_back(s);
      meta.context_lens.push_back(ctx);
      for (int b = 0; b < blocks_per; ++b) {
        const int i = s * blocks_per + b;
        meta.block_tables.push_back(order && order[0] == 'r'   ? 2700 - i
                                    : order && order[0] == 's' ? (i * 997) % 2700
                                                               : 100 + i);
      }
    }
    meta.query_start.push_back(ns);
    Tensor q = ref::f32_tensor(ref::random_floats(ns * heads * hd, 3), {ns, heads, hd});
    Tensor out = Tensor::cpu(DType::F32, {ns, heads, hd});
    AttentionParams p;
    p.scale = 0.125f;
    const double kv_bytes = 2.0 * ns * ctx * kvh * hd * dtype_info(ct).block_bytes;
    if (const char* e = std::getenv("LOOM_PERF_HOT_SECONDS")) {
      // Only the hot loop on the detected ISA, for a profiler to sample.
      const auto until = std::chrono::steady_clock::now() +
                         std::chrono::duration<double>(std::atof(e));
      while (std::chrono::steady_clock::now() < until) be->paged_attention(q, cache, meta, p, out);
      return;
    }
    ref::for_each_isa([&](cpu::Isa isa) {
      for (const bool cold : {true, false}) {
        std::vector<double> t;
        for (int i = 0; i < 200; ++i) {
          if (cold) {
            int acc = 0;
            for (size_t j = 0; j < evict.size(); j += 64) acc += evict[j];
            sink = acc;
            be->matmul(wake_x, wake_w, nullptr, wake_out);  // the pool's threads awake
          }
          const auto t0 = std::chrono::steady_clock::now();
          be->paged_attention(q, cache, meta, p, out);
          t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(t.begin(), t.end());
        const double median = t[t.size() / 2];
        std::printf(
            "decode attention %-4s %d seqs x %d ctx %-8s %-4s median %6.1f us  min %6.1f us  "
            "%5.1f GB/s of KV\n",
            std::string(dtype_name(ct)).c_str(), ns, ctx, std::string(cpu::isa_name(isa)).c_str(),
            cold ? "cold" : "hot", median * 1e6, t[0] * 1e6, kv_bytes / median / 1e9);
      }
    });
  }
}

}  // namespace
}  // namespace loom
