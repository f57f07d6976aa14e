// CUDA paged attention (and write_kv feeding it) against the CPU fp32 backend,
// on the mixed steps of attention_scenario.h: decodes, prefill chunks over
// cached prefixes and whole prefills in one step (with head sizes 64, 128 and
// 256 the prefill sequences go to the flash kernel and the decodes to the
// tensor-core decode kernel at groups of more than 4 query heads per KV head,
// else the CUDA-core one; other head sizes use the CUDA-core kernel for all).
// Tolerance: rel 1e-2 + abs 3e-3 (output rounded to bf16, fp32 softmax with
// fast exp). The flash kernel's own cases: test_cuda_flash_attention.cpp.
#include <cstdlib>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attention_scenario.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/kernels/kernels.h"

namespace loom {
namespace {

using namespace cudatest;

class CudaAttentionTest : public CudaAndCpuTest {
 protected:
  void run(const Scenario& sc) {
    SCOPED_TRACE(describe(sc));
    std::vector<float> again;
    const std::vector<float> got = run_scenario(*gpu_, sc, &again);
    check_and_report(got, run_scenario(*cpu_, sc), 1e-2, 3e-3, sc, "attention");
    // The same metadata again (served from the metadata cache) gives the same result.
    EXPECT_EQ(again, got);
  }
};

const std::vector<Seq> kMixed = {{1, 1},  {1, 17}, {1, 300}, {13, 40}, {33, 33},
                                 {5, 16}, {1, 16}, {7, 129}, {1, 32},  {16, 48}};

TEST_F(CudaAttentionTest, MixedBatchHeadSizesAndGqa) {
  for (int hd : {64, 128, 256})
    for (int ratio : {1, 4, 8}) {
      Scenario sc{2 * ratio, 2, hd, 16, kMixed, {}, static_cast<uint32_t>(hd + ratio)};
      sc.params.scale = 1.0f / std::sqrt(static_cast<float>(hd));
      run(sc);
    }
}

// Both decode kernels over bf16 caches at head sizes 64, 128 and 256: the
// tensor-core one (LOOM_ATTN_BF16_MMA=2: every group; by default groups of
// more than 4) and the CUDA-core one (=0), on the same steps: GQA groups of
// 1 to 12 (7: a partial head chunk), block sizes 1 to 32, split keys,
// sliding window and softcap. Each must match the reference.
TEST_F(CudaAttentionTest, DecodeKernelChoicesAtTensorCoreHeadSizes) {
  std::vector<std::pair<std::string, std::unique_ptr<Backend>>> kernels;
  for (const char* v : {"0", "2"}) {
    ::setenv("LOOM_ATTN_BF16_MMA", v, 1);
    kernels.emplace_back(std::string(v[0] == '0' ? "CUDA core" : "tensor core"),
                         make_cuda_backend(0));
    ::unsetenv("LOOM_ATTN_BF16_MMA");
  }
  auto check = [&](const Scenario& sc) {
    SCOPED_TRACE(describe(sc));
    const std::vector<float> want = run_scenario(*cpu_, sc);
    check_and_report(run_scenario(*gpu_, sc), want, 1e-2, 3e-3, sc, "default");
    for (auto& [name, be] : kernels)
      check_and_report(run_scenario(*be, sc), want, 1e-2, 3e-3, sc, name);
  };
  for (int hd : {64, 128, 256})
    for (auto [heads, kvh, bs] : {std::tuple{2, 2, 16}, {14, 2, 16}, {12, 1, 1}, {32, 8, 32}}) {
      Scenario sc{heads, kvh, hd, bs, kMixed, {}, static_cast<uint32_t>(hd + heads + bs)};
      sc.params.scale = 1.0f / std::sqrt(static_cast<float>(hd));
      check(sc);
    }
  Scenario sc{14, 2, 64, 16, {{1, 3000}, {3, 1025}, {1, 700}}, {}, 3};
  sc.params.scale = 0.125f;
  sc.params.sliding_window = 500;
  sc.params.logit_softcap = 30.0f;
  check(sc);
}

// Every instantiated head size plus the runtime-sized path (144, 200, 240, 8,
// 40), with GQA groups that use 1, 2, 4 and 8 heads per block.
TEST_F(CudaAttentionTest, AllHeadSizes) {
  for (int hd : {8, 16, 32, 40, 48, 80, 96, 112, 144, 160, 192, 200, 240})
    for (auto [heads, kvh] : {std::pair{2, 2}, {6, 2}, {16, 2}}) {
      Scenario sc{heads, kvh, hd, 16, kMixed, {}, static_cast<uint32_t>(hd * 7 + heads)};
      sc.params.scale = 1.0f / std::sqrt(static_cast<float>(hd));
      run(sc);
    }
  // Split keys, sliding window and softcap on the small and the runtime-sized heads.
  for (int hd : {16, 32, 80, 144}) {
    Scenario sc{8, 2, hd, 16, {{1, 3000}, {3, 1025}}, {}, static_cast<uint32_t>(hd + 1)};
    sc.params.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    run(sc);
    sc.params.sliding_window = 300;
    sc.params.logit_softcap = 30.0f;
    run(sc);
  }
}

TEST_F(CudaAttentionTest, OddGroupsAndBlockSizes) {
  for (auto [heads, kvh] : {std::pair{3, 1}, {12, 1}, {28, 4}, {6, 2}})
    for (int bs : {1, 8, 32}) {
      Scenario sc{heads, kvh, 128, bs, kMixed, {}, static_cast<uint32_t>(heads * 100 + bs)};
      sc.params.scale = 0.0883883f;
      run(sc);
    }
}

TEST_F(CudaAttentionTest, SlidingWindowAndSoftcap) {
  for (int window : {1, 8, 50})
    for (float cap : {0.0f, 30.0f}) {
      Scenario sc{8, 2, 128, 16, kMixed, {}, static_cast<uint32_t>(window + 3)};
      sc.params.scale = 0.0883883f;
      sc.params.sliding_window = window;
      sc.params.logit_softcap = cap;
      run(sc);
    }
  Scenario sc{8, 4, 256, 16, kMixed, {}, 77};
  sc.params.scale = 0.0625f;
  sc.params.sliding_window = 20;
  sc.params.logit_softcap = 50.0f;
  run(sc);
}

TEST_F(CudaAttentionTest, LongContextsSplitKeys) {
  // Few (token, kv head) items and long contexts: keys are split in partitions.
  for (int hd : {64, 128, 256}) {
    Scenario sc{8, 1, hd, 16, {{1, 3000}, {1, 5001}, {2, 1025}}, {}, static_cast<uint32_t>(hd)};
    sc.params.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    run(sc);
  }
  Scenario sc{32, 8, 128, 16, {{1, 4096}, {64, 2000}}, {}, 5};
  sc.params.scale = 0.0883883f;
  run(sc);
  sc.params.sliding_window = 700;
  run(sc);
}

// Long contexts split in many partitions (ragged lengths around 20k keys,
// one sequence with a prefill chunk so the decodes go through token_index),
// GQA 4 and 8, with and without a sliding window, over bf16 and FP8 caches
// (the CUDA-core and the tensor-core kernel); then under other split
// settings (LOOM_ATTN_*: short partitions up to the partition cap, few heads
// per block, more blocks per SM), which must match the reference as well,
// and with the blocks ordered token first and no L2 prefetch hint
// (LOOM_ATTN_HEADS_FIRST=0, LOOM_ATTN_L2_PREFETCH=0), which must give the
// default's bits.
TEST_F(CudaAttentionTest, LongContextsManyPartitions) {
  const std::vector<Seq> seqs = {{1, 20011}, {1, 7001}, {3, 12000}, {1, 16384}};
  struct Setting {
    const char* partition_keys;
    const char* blocks_per_sm;
    const char* heads_per_block;
    const char* heads_first;
    const char* l2_prefetch;
  };
  std::vector<std::pair<std::string, std::unique_ptr<Backend>>> split;  // besides gpu_'s defaults
  for (const Setting& set :
       {Setting{"64", "8", "2", "1", "256"}, Setting{"4096", "1", "8", "0", "128"},
        Setting{"1024", "0", "8", "0", "0"}}) {
    ::setenv("LOOM_ATTN_PARTITION_KEYS", set.partition_keys, 1);
    ::setenv("LOOM_ATTN_BLOCKS_PER_SM", set.blocks_per_sm, 1);
    ::setenv("LOOM_ATTN_HEADS_PER_BLOCK", set.heads_per_block, 1);
    ::setenv("LOOM_ATTN_HEADS_FIRST", set.heads_first, 1);
    ::setenv("LOOM_ATTN_L2_PREFETCH", set.l2_prefetch, 1);
    split.emplace_back(std::string("P/B/H/F/L2 ") + set.partition_keys + "/" + set.blocks_per_sm +
                           "/" + set.heads_per_block + "/" + set.heads_first + "/" +
                           set.l2_prefetch,
                       make_cuda_backend(0));
    ::unsetenv("LOOM_ATTN_PARTITION_KEYS");
    ::unsetenv("LOOM_ATTN_BLOCKS_PER_SM");
    ::unsetenv("LOOM_ATTN_HEADS_PER_BLOCK");
    ::unsetenv("LOOM_ATTN_HEADS_FIRST");
    ::unsetenv("LOOM_ATTN_L2_PREFETCH");
  }
  // The last setting splits as the defaults do: the same bits.
  const std::string same_split = split.back().first;
  for (bool fp8 : {false, true})
    for (auto [heads, kvh] : {std::pair{32, 8}, {64, 8}})
      for (int window : {0, 5000}) {
        Scenario sc{heads, kvh, 128, 16, seqs, {}, static_cast<uint32_t>(heads + window)};
        sc.params.scale = 0.0883883f;
        sc.params.sliding_window = window;
        sc.fp8_kv = fp8;
        SCOPED_TRACE(describe(sc));
        const std::vector<float> want = run_scenario(*cpu_, sc);
        const std::vector<float> got = run_scenario(*gpu_, sc);
        check_and_report(got, want, 1e-2, 3e-3, sc, "long ctx");
        for (auto& [name, be] : split) {
          SCOPED_TRACE(name);
          const std::vector<float> other = run_scenario(*be, sc);
          check_and_report(other, want, 1e-2, 3e-3, sc, name);
          if (name == same_split) {
            EXPECT_EQ(other, got) << "token first, no prefetch hint vs the defaults";
          }
        }
      }
}

// The split itself (pure, no GPU needed): partitions cover every key, at
// most kMaxAttnPartitions of them and at least 32 keys each unless one
// partition holds everything; few items fill at most one wave; long contexts
// get partitions of at most the cap while fewer than ~8 waves result; many
// tokens (a long prefill on this kernel) are not split.
TEST(CudaAttentionSplit, PartitionsCoverKeysWithinBounds) {
  const cuda::AttentionSplit split;  // cap 1024
  for (int64_t max_keys : {1, 31, 33, 1000, 8192, 20011, 32768, 131072, 1 << 20})
    for (int64_t items : {1, 8, 24, 128, 512, 4096, 65536})
      for (int64_t concurrent : {132, 528, 1056}) {
        SCOPED_TRACE(::testing::Message() << max_keys << " keys, " << items << " items, "
                                          << concurrent << " concurrent");
        const cuda::DecodePartitions p =
            cuda::decode_partitions(max_keys, items, concurrent, split);
        EXPECT_GE(p.keys * p.count, max_keys);
        EXPECT_LT((p.count - 1) * p.keys, max_keys);
        EXPECT_LE(p.count, cuda::kMaxAttnPartitions);
        if (p.count == 1) {
          EXPECT_EQ(p.keys, max_keys);
          continue;
        }
        EXPECT_GE(p.keys, 32);
        EXPECT_LE(items * p.count, 8 * concurrent + items);
        if (items < concurrent && max_keys <= split.max_partition_keys) {
          EXPECT_LE(items * p.count, concurrent);
        }
      }
  // 1 x 32k keys, 8 kv heads on 132 SMs x 4 blocks: 64 partitions of 512.
  const cuda::DecodePartitions one = cuda::decode_partitions(32768, 8, 528, split);
  EXPECT_EQ(one.keys, 512);
  EXPECT_EQ(one.count, 64);
  // 16 x 32k: capped at 1,024 keys (32 partitions, ~8 waves).
  const cuda::DecodePartitions sixteen = cuda::decode_partitions(32768, 128, 528, split);
  EXPECT_EQ(sixteen.keys, 1024);
  EXPECT_EQ(sixteen.count, 32);
  // 8,192 prefill tokens over 4k keys: not split.
  EXPECT_EQ(cuda::decode_partitions(4096, 8192 * 8, 528, split).count, 1);
}

// Malformed split settings are refused when the backend is made.
TEST_F(CudaAttentionTest, RejectsBadSplitSettings) {
  for (auto [name, value] : {std::pair{"LOOM_ATTN_PARTITION_KEYS", "16"},
                             {"LOOM_ATTN_PARTITION_KEYS", "1k"},
                             {"LOOM_ATTN_BLOCKS_PER_SM", "-1"},
                             {"LOOM_ATTN_HEADS_PER_BLOCK", "3"},
                             {"LOOM_ATTN_HEADS_FIRST", "2"},
                             {"LOOM_ATTN_L2_PREFETCH", "64"}}) {
    ::setenv(name, value, 1);
    EXPECT_THROW(static_cast<void>(make_cuda_backend(0)), Error) << name << "=" << value;
    ::unsetenv(name);
  }
}

TEST_F(CudaAttentionTest, DecodeBatch) {
  std::vector<Seq> seqs;
  for (int i = 0; i < 64; ++i) seqs.push_back({1, 1 + (i * 37) % 700});
  Scenario sc{32, 8, 128, 16, seqs, {}, 9};
  sc.params.scale = 0.0883883f;
  run(sc);
}

TEST_F(CudaAttentionTest, RejectsBadMetadata) {
  const int bs = 16;
  KvLayerCache cache{gpu_->alloc(DType::BF16, {4, bs, 1, 64}),
                     gpu_->alloc(DType::BF16, {4, bs, 1, 64})};
  AttentionMetadata m;
  m.num_seqs = 1;
  m.query_start = {0, 1};
  m.context_lens = {20};
  m.max_blocks_per_seq = 2;
  m.block_tables = {0, 4};  // block 4 does not exist
  m.slot_mapping = {4 * bs + 3};
  Tensor q = gpu_->alloc(DType::BF16, {1, 1, 64}), out = gpu_->alloc(DType::BF16, {1, 1, 64});
  AttentionParams p;
  EXPECT_THROW(gpu_->paged_attention(q, cache, m, p, out), Error);
  m.block_tables = {0, 3};
  m.slot_mapping = {3 * bs + 3};
  EXPECT_NO_THROW(gpu_->paged_attention(q, cache, m, p, out));
  Tensor q96 = gpu_->alloc(DType::BF16, {1, 1, 96});
  EXPECT_THROW(gpu_->paged_attention(q96, cache, m, p, out), Error);  // cache has head_dim 64
  // Head sizes that are not a multiple of 8, or above 256, have no kernel.
  for (int hd : {20, 264}) {
    KvLayerCache c{gpu_->alloc(DType::BF16, {4, bs, 1, hd}),
                   gpu_->alloc(DType::BF16, {4, bs, 1, hd})};
    Tensor qh = gpu_->alloc(DType::BF16, {1, 1, hd}), oh = gpu_->alloc(DType::BF16, {1, 1, hd});
    EXPECT_THROW(gpu_->paged_attention(qh, c, m, p, oh), Error) << hd;
  }
}

}  // namespace
}  // namespace loom
