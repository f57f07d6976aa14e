// KvManager: unit tests of allocation, prefix caching, LRU eviction,
// copy-on-write and accounting, plus a randomised test checking every
// invariant (and reference counts against the live tables) after each op.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "core/error.h"
#include "kv/kv_manager.h"

namespace loom {
namespace {

std::vector<int32_t> iota_tokens(int n, int start = 0) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

TEST(BlockHash, ChainsParentTokensAndSalt) {
  auto t = iota_tokens(16);
  BlockHash a = hash_block(kRootBlockHash, t, 0);
  EXPECT_EQ(a, hash_block(kRootBlockHash, t, 0));
  EXPECT_NE(a, hash_block(kRootBlockHash, t, 1));
  EXPECT_NE(a, hash_block(a, t, 0));
  auto u = t;
  u[15] = 999;
  EXPECT_NE(a, hash_block(kRootBlockHash, u, 0));
  EXPECT_NE(hash_cache_salt("tenant-a"), hash_cache_salt("tenant-b"));
  EXPECT_EQ(hash_cache_salt(""), 0u);
  // No collisions among many similar blocks (both halves distinct).
  std::set<uint64_t> lo, hi;
  for (int i = 0; i < 20000; ++i) {
    auto v = iota_tokens(16, i);
    BlockHash h = hash_block(kRootBlockHash, v, 0);
    lo.insert(h.lo);
    hi.insert(h.hi);
  }
  EXPECT_EQ(lo.size(), 20000u);
  EXPECT_EQ(hi.size(), 20000u);
}

TEST(KvManager, BudgetToBlocks) {
  EXPECT_EQ(KvManager::num_blocks_for_budget(1000, 100), 10);
  EXPECT_EQ(KvManager::num_blocks_for_budget(1099, 100), 10);
  EXPECT_THROW(KvManager::num_blocks_for_budget(99, 100), Error);
}

TEST(KvManager, ReserveGrowsAndFrees) {
  KvManager kv({.num_blocks = 4, .block_size = 4});
  BlockTable t;
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.reserve(t, 5, &copies));
  EXPECT_EQ(t.num_blocks(), 2);
  EXPECT_EQ(kv.num_used_blocks(), 2);
  EXPECT_EQ(kv.stats().filled_slots, 5);
  EXPECT_DOUBLE_EQ(kv.stats().kv_waste(), 3.0 / 8.0);
  ASSERT_TRUE(kv.reserve(t, 8, &copies));
  EXPECT_EQ(t.num_blocks(), 2);
  EXPECT_DOUBLE_EQ(kv.stats().kv_waste(), 0.0);
  EXPECT_FALSE(kv.reserve(t, 17, &copies));  // needs 3 more, 2 free
  EXPECT_EQ(t.num_tokens(), 8);
  EXPECT_TRUE(copies.empty());
  kv.check_invariants();
  t.reset();
  EXPECT_EQ(kv.num_used_blocks(), 0);
  kv.check_invariants();
}

TEST(KvManager, TableFreesItselfOnDestruction) {
  KvManager kv({.num_blocks = 4, .block_size = 4});
  {
    BlockTable t;
    ASSERT_TRUE(kv.reserve(t, 9, nullptr));
    BlockTable moved = std::move(t);
    EXPECT_EQ(kv.num_used_blocks(), 3);
  }
  EXPECT_EQ(kv.num_used_blocks(), 0);
  kv.check_invariants();
}

TEST(KvManager, PrefixHitAfterFree) {
  KvManager kv({.num_blocks = 8, .block_size = 4});
  auto tokens = iota_tokens(10);
  BlockTable a;
  ASSERT_TRUE(kv.reserve(a, 10, nullptr));
  kv.commit(a, tokens, 10, 0);
  EXPECT_EQ(kv.stats().cached_blocks, 2);  // two full blocks, the third is partial
  std::vector<BlockId> a_blocks = a.blocks();
  a.reset();
  EXPECT_EQ(kv.num_used_blocks(), 0);
  EXPECT_EQ(kv.stats().cached_free_blocks, 2);

  EXPECT_EQ(kv.cached_prefix_tokens(tokens, 0, 9), 8);
  EXPECT_EQ(kv.cached_prefix_tokens(tokens, 0, 7), 4);
  EXPECT_EQ(kv.cached_prefix_tokens(tokens, 42, 9), 0);  // other salt
  BlockTable b;
  EXPECT_EQ(kv.acquire_cached_prefix(b, tokens, 0, 9), 8);
  EXPECT_EQ(b.blocks()[0], a_blocks[0]);
  EXPECT_EQ(b.blocks()[1], a_blocks[1]);
  EXPECT_EQ(kv.num_used_blocks(), 2);
  kv.check_invariants();
  // A live sequence's blocks are shared too.
  BlockTable c;
  EXPECT_EQ(kv.acquire_cached_prefix(c, tokens, 0, 100), 8);
  EXPECT_EQ(kv.ref_count(a_blocks[0]), 2);
  // Diverging token in the second block: only the first block hits.
  auto other = tokens;
  other[6] = 77;
  EXPECT_EQ(kv.cached_prefix_tokens(other, 0, 10), 4);
  b.reset();
  c.reset();
  kv.check_invariants();
}

TEST(KvManager, NoCachingWhenDisabled) {
  KvManager kv({.num_blocks = 8, .block_size = 4, .enable_prefix_caching = false});
  auto tokens = iota_tokens(8);
  BlockTable a;
  ASSERT_TRUE(kv.reserve(a, 8, nullptr));
  kv.commit(a, tokens, 8, 0);
  a.reset();
  EXPECT_EQ(kv.cached_prefix_tokens(tokens, 0, 8), 0);
  BlockTable b;
  EXPECT_EQ(kv.acquire_cached_prefix(b, tokens, 0, 8), 0);
  EXPECT_EQ(kv.stats().cached_blocks, 0);
}

TEST(KvManager, EvictsLeastRecentlyFreedAndTailFirst) {
  KvManager kv({.num_blocks = 4, .block_size = 2});
  auto t1 = iota_tokens(4, 100);
  auto t2 = iota_tokens(4, 200);
  BlockTable a, b;
  ASSERT_TRUE(kv.reserve(a, 4, nullptr));
  kv.commit(a, t1, 4, 0);
  ASSERT_TRUE(kv.reserve(b, 4, nullptr));
  kv.commit(b, t2, 4, 0);
  a.reset();  // a's blocks: tail then head into the LRU
  b.reset();
  EXPECT_EQ(kv.num_free_blocks(), 4);
  EXPECT_EQ(kv.stats().cached_blocks, 4);
  // Taking one block evicts a's last block: a keeps its first block cached.
  BlockTable c;
  ASSERT_TRUE(kv.reserve(c, 1, nullptr));
  EXPECT_EQ(kv.stats().evictions, 1);
  EXPECT_EQ(kv.cached_prefix_tokens(t1, 0, 4), 2);
  EXPECT_EQ(kv.cached_prefix_tokens(t2, 0, 4), 4);
  // A hit refreshes: t2 reused then freed again goes to the back of the LRU.
  BlockTable d;
  EXPECT_EQ(kv.acquire_cached_prefix(d, t2, 0, 4), 4);
  d.reset();
  ASSERT_TRUE(kv.reserve(c, 3, nullptr));  // evicts a's first block
  EXPECT_EQ(kv.cached_prefix_tokens(t1, 0, 4), 0);
  EXPECT_EQ(kv.cached_prefix_tokens(t2, 0, 4), 4);
  kv.check_invariants();
}

TEST(KvManager, CopyOnWriteOfSharedPartialBlock) {
  KvManager kv({.num_blocks = 8, .block_size = 4});
  auto prompt = iota_tokens(6);
  BlockTable parent;
  ASSERT_TRUE(kv.reserve(parent, 6, nullptr));
  kv.commit(parent, prompt, 6, 0);
  BlockTable child = kv.fork(parent);
  EXPECT_EQ(kv.num_used_blocks(), 2);
  EXPECT_EQ(kv.ref_count(parent.blocks()[1]), 2);
  EXPECT_EQ(kv.blocks_needed(child, 7), 1);  // the copy
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(kv.reserve(child, 7, &copies));
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, parent.blocks()[1]);
  EXPECT_EQ(copies[0].dst, child.blocks()[1]);
  EXPECT_EQ(child.blocks()[0], parent.blocks()[0]);  // full block stays shared
  EXPECT_EQ(kv.ref_count(parent.blocks()[1]), 1);
  // The last holder writes in place.
  copies.clear();
  ASSERT_TRUE(kv.reserve(parent, 7, &copies));
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(kv.num_used_blocks(), 3);
  EXPECT_EQ(kv.stats().filled_slots, 4 + 3 + 3);
  kv.check_invariants();
  // Block-aligned fork: no copy, a new block each.
  BlockTable p2;
  ASSERT_TRUE(kv.reserve(p2, 4, nullptr));
  BlockTable c2 = kv.fork(p2);
  EXPECT_EQ(kv.blocks_needed(c2, 5), 1);
  ASSERT_TRUE(kv.reserve(c2, 5, &copies));
  EXPECT_TRUE(copies.empty());
  parent.reset();
  child.reset();
  p2.reset();
  c2.reset();
  EXPECT_EQ(kv.num_used_blocks(), 0);
  kv.check_invariants();
}

TEST(KvManager, CopyOnWriteFailsCleanlyWhenFull) {
  KvManager kv({.num_blocks = 2, .block_size = 4});
  BlockTable parent;
  ASSERT_TRUE(kv.reserve(parent, 6, nullptr));
  BlockTable child = kv.fork(parent);
  std::vector<BlockCopy> copies;
  EXPECT_FALSE(kv.reserve(child, 7, &copies));
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(child.num_tokens(), 6);
  kv.check_invariants();
}

TEST(KvManager, DuplicateHashKeepsFirstWriter) {
  KvManager kv({.num_blocks = 8, .block_size = 4});
  auto tokens = iota_tokens(4);
  BlockTable a, b;
  ASSERT_TRUE(kv.reserve(a, 4, nullptr));
  ASSERT_TRUE(kv.reserve(b, 4, nullptr));
  kv.commit(a, tokens, 4, 0);
  kv.commit(b, tokens, 4, 0);
  EXPECT_TRUE(kv.is_cached(a.blocks()[0]));
  EXPECT_FALSE(kv.is_cached(b.blocks()[0]));
  b.reset();
  a.reset();
  kv.check_invariants();
}

TEST(KvManager, HitRateAccounting) {
  KvManager kv({.num_blocks = 8, .block_size = 4});
  kv.note_prefix_lookup(10, 8);
  kv.note_prefix_lookup(10, 0);
  EXPECT_DOUBLE_EQ(kv.stats().prefix_hit_rate(), 0.4);
}

// Random operations over many tables; after each, the manager's invariants
// hold and every block's ref count equals the number of live tables holding it.
TEST(KvManager, RandomisedOperationsKeepInvariants) {
  for (int seed = 0; seed < 4; ++seed) {
    std::mt19937_64 rng(seed);
    const int32_t bs = 1 + seed * 5;
    KvManager kv({.num_blocks = 40, .block_size = bs, .enable_prefix_caching = seed != 3});
    struct Live {
      std::vector<int32_t> tokens;
      BlockTable table;
    };
    std::vector<Live> live;
    std::vector<std::vector<int32_t>> prefixes;
    for (int i = 0; i < 8; ++i) {
      std::vector<int32_t> p(1 + rng() % 60);
      for (auto& x : p) x = int32_t(rng() % 50);
      prefixes.push_back(p);
    }
    std::uniform_int_distribution<int> op(0, 9);
    for (int step = 0; step < 6000; ++step) {
      int o = op(rng);
      if (o <= 2 || live.empty()) {  // new sequence: prefix + random tail, cached prefix
        Live s;
        s.tokens = prefixes[rng() % prefixes.size()];
        for (int k = int(rng() % 20); k > 0; --k) s.tokens.push_back(int32_t(rng() % 50));
        int32_t n = int32_t(s.tokens.size());
        int32_t hit = kv.acquire_cached_prefix(s.table, s.tokens, 0, n - 1);
        ASSERT_EQ(hit % bs, 0);
        ASSERT_EQ(hit, s.table.num_tokens());
        std::vector<BlockCopy> copies;
        if (kv.reserve(s.table, n, &copies)) {
          ASSERT_TRUE(copies.empty());
          kv.commit(s.table, s.tokens, n, 0);
          live.push_back(std::move(s));
        }
      } else if (o <= 5) {  // append tokens
        Live& s = live[rng() % live.size()];
        int32_t add = 1 + int32_t(rng() % 3);
        int32_t before = kv.num_free_blocks();
        int32_t need = kv.blocks_needed(s.table, s.table.num_tokens() + add);
        std::vector<BlockCopy> copies;
        bool ok = kv.reserve(s.table, s.table.num_tokens() + add, &copies);
        ASSERT_EQ(ok, need <= before);
        if (ok) {
          for (int k = 0; k < add; ++k) s.tokens.push_back(int32_t(rng() % 50));
          kv.commit(s.table, s.tokens, int32_t(s.tokens.size()), 0);
          for (const auto& c : copies) ASSERT_NE(c.src, c.dst);
        }
      } else if (o == 6) {  // fork
        Live& s = live[rng() % live.size()];
        Live c;
        c.tokens = s.tokens;
        c.table = kv.fork(s.table);
        live.push_back(std::move(c));
      } else {  // free
        size_t i = rng() % live.size();
        live.erase(live.begin() + long(i));
      }
      kv.check_invariants();
      std::map<BlockId, int> expected;
      for (const auto& s : live) {
        ASSERT_EQ(s.table.num_tokens(), int32_t(s.tokens.size()));
        for (BlockId b : s.table.blocks()) ++expected[b];
      }
      for (BlockId b = 0; b < kv.num_blocks(); ++b) ASSERT_EQ(kv.ref_count(b), expected[b]);
    }
    live.clear();
    EXPECT_EQ(kv.num_used_blocks(), 0);
    EXPECT_EQ(kv.stats().filled_slots, 0);
    kv.check_invariants();
  }
}

}  // namespace
}  // namespace loom
