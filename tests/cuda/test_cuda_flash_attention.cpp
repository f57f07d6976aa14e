// The flash prefill path of CUDA paged attention (sequences with more than one
// new token, head sizes 64, 128 and 256; see flash_prefill.cuh) against the
// CPU fp32 reference and against the CUDA-core kernel (LOOM_FLASH_PREFILL=0),
// on the steps of attention_scenario.h. Tolerance: rel 1e-2 + abs 3e-3 as in
// test_cuda_attention.cpp (bf16 output; the kernel also rounds the softmax
// probabilities to bf16 for the P V product). Each scenario logs its worst
// error relative to the tolerance. The work-list tests (FlashPrefillTiles)
// are host code and run without a GPU.
#include <cstdlib>
#include <map>

#include "attention_scenario.h"
#include "backend/cuda/kernels/kernels.h"
#include "backend/cuda/step_metadata.h"

namespace loom {
namespace {

using namespace cudatest;

// --- the work list (host) ---

AttentionMetadata step_of(const std::vector<Seq>& seqs) {
  AttentionMetadata m;
  m.num_seqs = static_cast<int32_t>(seqs.size());
  m.query_start = {0};
  for (const Seq& s : seqs) {
    m.query_start.push_back(m.query_start.back() + s.n_new);
    m.context_lens.push_back(s.ctx);
  }
  return m;
}

int64_t tokens_of(const AttentionMetadata& m) { return m.query_start.back(); }

TEST(FlashPrefillTiles, NoneWithoutPrefill) {
  const AttentionMetadata m = step_of({{1, 5}, {1, 1}, {0, 3}, {1, 700}});
  std::vector<int32_t> tiles = {7};
  cuda::build_prefill_tiles(m, tokens_of(m), 4, cuda::kFlashBlockM, tiles);
  EXPECT_TRUE(tiles.empty());
}

TEST(FlashPrefillTiles, LongestFirst) {
  // Sequence 0: 130 rows (group 1) in tiles at rows 0, 64, 128 whose last rows
  // see 64, 128 and 130 keys; sequence 2: 3 rows at positions 7..9 (10 keys).
  const AttentionMetadata m = step_of({{130, 130}, {1, 9}, {3, 10}});
  std::vector<int32_t> tiles;
  cuda::build_prefill_tiles(m, tokens_of(m), 1, 64, tiles);
  EXPECT_EQ(tiles, (std::vector<int32_t>{0, 128, 0, 64, 0, 0, 2, 0}));
}

TEST(FlashPrefillTiles, GroupRowsStraddleTiles) {
  // Group 3: 50 tokens at positions 10..59 are 150 rows; the tile at row 64
  // ends in the middle of token 42 (rows 126..128).
  const AttentionMetadata m = step_of({{50, 60}});
  std::vector<int32_t> tiles;
  cuda::build_prefill_tiles(m, tokens_of(m), 3, 64, tiles);
  EXPECT_EQ(tiles, (std::vector<int32_t>{0, 128, 0, 64, 0, 0}));
}

TEST(FlashPrefillTiles, CoverEveryRowOnce) {
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    std::vector<Seq> seqs;
    const int ns = 1 + static_cast<int>(rng() % 12);
    for (int s = 0; s < ns; ++s) {
      const int n_new = rng() % 3 == 0 ? static_cast<int>(rng() % 2) : static_cast<int>(rng() % 300);
      seqs.push_back({n_new, n_new + static_cast<int>(rng() % 500)});
    }
    const AttentionMetadata m = step_of(seqs);
    for (int group : {1, 2, 3, 4, 7, 8, 12}) {
      SCOPED_TRACE(::testing::Message() << "round " << round << " group " << group);
      std::vector<int32_t> tiles;
      cuda::build_prefill_tiles(m, tokens_of(m), group, cuda::kFlashBlockM, tiles);
      ASSERT_EQ(tiles.size() % 2, 0u);
      std::map<std::pair<int, int>, int> seen;
      int64_t prev_keys = INT64_MAX;
      for (size_t i = 0; i < tiles.size(); i += 2) {
        const int s = tiles[i], r0 = tiles[i + 1];
        ASSERT_TRUE(s >= 0 && s < ns);
        const int64_t rows = int64_t{seqs[s].n_new} * group;
        EXPECT_GT(seqs[s].n_new, 1);
        EXPECT_EQ(r0 % cuda::kFlashBlockM, 0);
        ASSERT_LT(r0, rows);
        const int times = ++seen[std::make_pair(s, r0)];
        EXPECT_EQ(times, 1);
        const int64_t last = std::min<int64_t>(rows, r0 + cuda::kFlashBlockM) - 1;
        const int64_t keys = seqs[s].ctx - seqs[s].n_new + last / group + 1;
        EXPECT_LE(keys, prev_keys);
        prev_keys = keys;
      }
      size_t expected = 0;
      for (const Seq& q : seqs)
        if (q.n_new > 1) expected += (int64_t{q.n_new} * group + cuda::kFlashBlockM - 1) / cuda::kFlashBlockM;
      EXPECT_EQ(seen.size(), expected);
    }
  }
}

TEST(FlashPrefillTiles, MalformedMetadataIsBounded) {
  AttentionMetadata m = step_of({{5, 5}, {9, 9}});
  std::vector<int32_t> tiles;
  m.query_start.pop_back();  // too short: nothing
  cuda::build_prefill_tiles(m, 14, 1, 64, tiles);
  EXPECT_TRUE(tiles.empty());
  m = step_of({{5, 5}, {9, 9}});
  m.query_start[2] = 1000;  // past the step's tokens: clamped to 14
  cuda::build_prefill_tiles(m, 14, 1, 64, tiles);
  EXPECT_EQ(tiles, (std::vector<int32_t>{1, 0, 0, 0}));
  m.context_lens.pop_back();
  cuda::build_prefill_tiles(m, 14, 1, 64, tiles);
  EXPECT_TRUE(tiles.empty());
}

// --- the kernel (GPU) ---

class CudaFlashAttentionTest : public CudaAndCpuTest {
 protected:
  void check(Scenario sc) {
    if (sc.params.scale == 1.0f) sc.params.scale = 1.0f / std::sqrt(static_cast<float>(sc.head_dim));
    SCOPED_TRACE(describe(sc));
    std::vector<float> again;
    const std::vector<float> got = run_scenario(*gpu_, sc, &again);
    check_and_report(got, run_scenario(*cpu_, sc), 1e-2, 3e-3, sc, "flash");
    EXPECT_EQ(again, got) << "the same step again differs";
  }
};

// Prompts (no cached prefix) around the tile sizes: BLOCK_N 64 keys (32 for
// head size 256), BLOCK_M 64 rows = 64 / group tokens.
const std::vector<Seq> kPrompts = {{2, 2},   {3, 3},   {15, 15}, {16, 16},   {17, 17},   {31, 31},  {32, 32},
                                   {33, 33}, {63, 63}, {64, 64}, {65, 65}, {127, 127}, {128, 128}, {129, 129}};

std::vector<Seq> with(std::vector<Seq> a, const std::vector<Seq>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_F(CudaFlashAttentionTest, HeadSizesGroupsBlockSizes) {
  // Prompts plus a decode and a chunk over a cached prefix in the same step.
  const std::vector<Seq> seqs = with(kPrompts, {{1, 40}, {37, 100}});
  for (int hd : {64, 128, 256})
    for (int ratio : {1, 4, 8})
      for (int bs : {1, 7, 16, 32})
        check({2 * ratio, 2, hd, bs, seqs, {}, static_cast<uint32_t>(hd + ratio * 7 + bs)});
}

TEST_F(CudaFlashAttentionTest, PromptLengthSweep) {
  // Every length 1..64, then up to 300 in steps of 7: ~100 sequences, many tiles.
  std::vector<Seq> seqs;
  for (int n = 1; n <= 64; ++n) seqs.push_back({n, n});
  for (int n = 65; n <= 300; n += 7) seqs.push_back({n, n});
  seqs.push_back({300, 300});
  for (auto [hd, bs] : {std::pair{64, 7}, {128, 16}, {256, 32}})
    check({8, 2, hd, bs, seqs, {}, static_cast<uint32_t>(hd)});
}

TEST_F(CudaFlashAttentionTest, ChunkedPrefillOverCachedPrefixes) {
  const std::vector<Seq> seqs = {{37, 100}, {64, 1000}, {129, 200}, {5, 5000}, {2, 3},   {300, 301},
                                 {1, 50},   {1, 1},     {16, 16},   {63, 700}, {1, 4097}, {2, 65}};
  for (int hd : {64, 128, 256})
    for (int ratio : {1, 4, 8})
      for (int bs : {7, 16}) check({2 * ratio, 2, hd, bs, seqs, {}, static_cast<uint32_t>(hd * 3 + ratio + bs)});
}

TEST_F(CudaFlashAttentionTest, SlidingWindowAndSoftcap) {
  const std::vector<Seq> seqs = {{200, 200}, {65, 65}, {37, 300}, {1, 80}, {130, 1000}, {2, 2}, {33, 97}};
  for (int hd : {64, 128, 256})
    for (int window : {1, 5, 33, 64, 100})
      for (float cap : {0.0f, 30.0f}) {
        Scenario sc{8, 2, hd, window == 33 ? 7 : 16, seqs, {}, static_cast<uint32_t>(hd + window)};
        sc.params.sliding_window = window;
        sc.params.logit_softcap = cap;
        check(sc);
      }
  // Gemma-2-like: head size 256, groups of 2, window 4096 over shorter contexts, softcap 50.
  Scenario sc{8, 4, 256, 16, seqs, {}, 3};
  sc.params.scale = 0.0625f;
  sc.params.sliding_window = 4096;
  sc.params.logit_softcap = 50.0f;
  check(sc);
}

TEST_F(CudaFlashAttentionTest, OddGroups) {
  // Groups 3, 12, 7, 5: a tile's 64 rows end inside a token.
  const std::vector<Seq> seqs = with(kPrompts, {{37, 100}, {1, 9}});
  for (auto [heads, kvh] : {std::pair{3, 1}, {12, 1}, {28, 4}, {40, 8}})
    for (int bs : {1, 16}) check({heads, kvh, 128, bs, seqs, {}, static_cast<uint32_t>(heads + bs)});
}

TEST_F(CudaFlashAttentionTest, LongPrompts) {
  check({16, 2, 128, 16, {{1024, 1024}, {700, 2000}, {1, 3000}}, {}, 11});
  check({32, 8, 64, 16, {{512, 512}, {513, 1500}}, {}, 12});
  check({8, 1, 256, 32, {{777, 777}}, {}, 13});
}

TEST_F(CudaFlashAttentionTest, MatchesCudaCoreKernel) {
  // The same steps through the CUDA-core kernel only.
  ::setenv("LOOM_FLASH_PREFILL", "0", 1);
  std::unique_ptr<Backend> old = make_cuda_backend(0);
  ::unsetenv("LOOM_FLASH_PREFILL");
  const std::vector<Seq> seqs = with(kPrompts, {{37, 100}, {1, 40}, {300, 700}});
  for (int hd : {64, 128, 256})
    for (int window : {0, 33})
      for (float cap : {0.0f, 30.0f}) {
        Scenario sc{8, 2, hd, 16, seqs, {}, static_cast<uint32_t>(hd + window)};
        sc.params.scale = 1.0f / std::sqrt(static_cast<float>(hd));
        sc.params.sliding_window = window;
        sc.params.logit_softcap = cap;
        SCOPED_TRACE(describe(sc));
        check_and_report(run_scenario(*gpu_, sc), run_scenario(*old, sc), 1e-2, 3e-3, sc, "flash vs old");
      }
}

TEST_F(CudaFlashAttentionTest, GroupSizesAlternateInOneStep) {
  // Layers with different groups under one step's metadata: the work list of
  // each group size is built and uploaded when first asked for in the step.
  const std::vector<Seq> seqs = with(kPrompts, {{37, 100}, {1, 40}});
  Scenario a{8, 2, 128, 16, seqs, {}, 5}, b{8, 8, 128, 16, seqs, {}, 5}, c{6, 2, 128, 16, seqs, {}, 5};
  for (Scenario* sc : {&a, &b, &c}) sc->params.scale = 0.0883883f;
  ScenarioRun ga(*gpu_, a), gb(*gpu_, b), gc(*gpu_, c);
  const std::vector<float> want_a = run_scenario(*cpu_, a), want_b = run_scenario(*cpu_, b),
                           want_c = run_scenario(*cpu_, c);
  const AttentionMetadata& step = ga.new_tokens_step();  // the same contents as gb's and gc's
  for (int round = 0; round < 2; ++round) {
    check_and_report(ga.attend(&step), want_a, 1e-2, 3e-3, a, "group 4");
    check_and_report(gb.attend(&step), want_b, 1e-2, 3e-3, b, "group 1");
    check_and_report(gc.attend(&step), want_c, 1e-2, 3e-3, c, "group 3");
  }
}

}  // namespace
}  // namespace loom
