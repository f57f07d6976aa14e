// The FP8 E4M3 KV cache on the GPU: write_kv and the fused split_qkv store
// the CPU backend's bytes; paged attention over it (flash prefill and decode
// kernels) vs the CPU backend attending over the same bytes dequantised
// (tolerance as the bf16 attention test: rel 1e-2 + abs 3e-3; the tensor-core
// decode kernel rounds the softmax weights to f16, 2^-11 relative, well
// within).
#include <cstdio>

#include "attention_scenario.h"
#include "core/fp8.h"
#include "fp8_test_util.h"

namespace loom {
namespace {

using namespace cudatest;

void run_fp8_kv(Backend& gpu, Backend& cpu, Scenario sc) {
  sc.fp8_kv = true;
  SCOPED_TRACE(describe(sc));
  ScenarioRun g(gpu, sc), c(cpu, sc);
  EXPECT_EQ(g.k_cache_bytes(), c.k_cache_bytes())
      << "write_kv stored other bytes than the CPU backend";
  check_and_report(g.attend(), c.attend(), 1e-2, 3e-3, sc, "fp8 kv");
}

const std::vector<Seq> kMixed = {{1, 1},  {1, 17}, {1, 300}, {13, 40}, {33, 33},
                                 {5, 16}, {1, 16}, {7, 129}, {1, 32},  {16, 48}};

TEST_F(CudaFp8Test, Fp8KvAttentionMatchesCpu) {
  // Flash prefill (64, 128, 256) and the tensor-core decode kernel (1, 2, 4
  // and 8 heads per block; 16 in two chunks of 8); the runtime-sized
  // CUDA-core decode kernel (80, 96, 112, 40).
  for (int hd : {64, 128, 256, 80, 96, 112, 40})
    for (int ratio : {1, 2, 4, 8, 16}) {
      Scenario sc{2 * ratio, 2, hd, 16, kMixed, {}, static_cast<uint32_t>(hd + ratio)};
      sc.params.scale = 1.0f / std::sqrt(static_cast<float>(hd));
      run_fp8_kv(*gpu_, *cpu_, sc);
    }
  // Split keys, sliding window and softcap; odd block sizes.
  for (int hd : {64, 128, 256}) {
    Scenario sc{
        8, 1, hd, 16, {{1, 3000}, {1, 5001}, {2, 1025}, {40, 700}}, {}, static_cast<uint32_t>(hd)};
    sc.params.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    run_fp8_kv(*gpu_, *cpu_, sc);
    sc.params.sliding_window = 300;
    sc.params.logit_softcap = 30.0f;
    run_fp8_kv(*gpu_, *cpu_, sc);
  }
  for (int bs : {1, 8, 32}) {
    Scenario sc{12, 4, 128, bs, kMixed, {}, static_cast<uint32_t>(bs)};
    sc.params.scale = 0.0883883f;
    run_fp8_kv(*gpu_, *cpu_, sc);
  }
  // Long contexts in many partitions (ragged, ~20k keys), GQA 4 and 8, with
  // and without a sliding window.
  for (auto [heads, kvh] : {std::pair{32, 8}, {64, 8}})
    for (int window : {0, 5000}) {
      Scenario sc{heads,
                  kvh,
                  128,
                  16,
                  {{1, 20011}, {1, 7001}, {3, 12000}, {1, 16384}},
                  {},
                  static_cast<uint32_t>(heads + window)};
      sc.params.scale = 0.0883883f;
      sc.params.sliding_window = window;
      run_fp8_kv(*gpu_, *cpu_, sc);
    }
}

// split_qkv into an FP8 cache: v stores the bytes write_kv stores, k those of
// the unfused path (rope, then write_kv) or one E4M3 step away (the two rope
// kernels may round the rotation to bf16 differently).
TEST_F(CudaFp8Test, SplitQkvIntoFp8CacheEqualsUnfused) {
  const int64_t blocks = 6, bs = 16, t = 7;
  for (int64_t hd : {64, 128, 80})
    for (auto [heads, kvh] : {std::pair<int64_t, int64_t>{4, 1}, {6, 2}})
      for (int rot : {static_cast<int>(hd), static_cast<int>(hd / 2)}) {
        SCOPED_TRACE(::testing::Message()
                     << "hd " << hd << " heads " << heads << "/" << kvh << " rot " << rot);
        const int64_t q_dim = heads * hd, kv_dim = kvh * hd;
        const QkvRows in = random_qkv_rows(t, q_dim, kv_dim, 81);
        const std::vector<float> freq = rope_inv_freq(rot);
        Tensor pos = gpu_i32(*gpu_, {0, 1, 5, 17, 100, 1000, 4095});
        Tensor inv = gpu_->prepare_weight(cpu_f32(freq, {rot / 2}));
        AttentionMetadata meta;
        meta.slot_mapping = {0, 15, 16, -1, 79, 33, 40};
        const std::vector<float> scales = fp8_kv_scales(static_cast<int>(kvh));
        auto fp8_cache = [&] {
          KvLayerCache c{gpu_->alloc(DType::F8_E4M3, {blocks, bs, kvh, hd}),
                         gpu_->alloc(DType::F8_E4M3, {blocks, bs, kvh, hd})};
          c.k_scale = gpu_f32(*gpu_, scales, {kvh});
          c.v_scale = gpu_f32(*gpu_, scales, {kvh});
          return c;
        };
        KvLayerCache ref = fp8_cache(), got = fp8_cache();
        Tensor k_ref = gpu_bf16(*gpu_, in.k, {t, kvh, hd});
        gpu_->rope(k_ref, pos, inv, rot, false, 1.1f);
        gpu_->write_kv(k_ref, gpu_bf16(*gpu_, in.v, {t, kvh, hd}), ref, meta);
        Tensor q = gpu_->alloc(DType::BF16, {t, heads, hd}), none;
        Backend::QkvRope r{&pos, &inv, rot, false, 1.1f};
        gpu_->split_qkv(gpu_bf16(*gpu_, in.qkv, {t, q_dim + 2 * kv_dim}), &r, q, none, none, &got,
                        &meta);
        auto bytes = [&](const Tensor& c) {
          std::vector<uint8_t> b(static_cast<size_t>(c.nbytes()));
          gpu_->copy_to_host(b.data(), c, b.size());
          return b;
        };
        EXPECT_EQ(bytes(got.v), bytes(ref.v));
        const auto gk = bytes(got.k), rk = bytes(ref.k);
        int off_by_one = 0, bad = 0;
        for (size_t i = 0; i < gk.size(); ++i) {
          if (gk[i] == rk[i]) continue;
          const float a = fp8_e4m3_to_f32(gk[i]), b = fp8_e4m3_to_f32(rk[i]);
          if (std::fabs(a - b) <= 0.13f * std::max(std::fabs(a), std::fabs(b)) + 0.002f)
            ++off_by_one;
          else if (bad++ < 5)
            ADD_FAILURE() << "k byte " << i << ": " << a << " vs " << b;
        }
        EXPECT_LE(off_by_one, static_cast<int>(gk.size() / 50)) << "k bytes one E4M3 step apart";
      }
}

}  // namespace
}  // namespace loom
