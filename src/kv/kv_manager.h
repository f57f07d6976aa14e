// KvManager: the pool of fixed-size KV blocks, per-sequence block tables with
// reference counts, automatic prefix caching (hash-chained full blocks, free
// cached blocks kept in LRU order and evicted on demand) and copy-on-write of
// shared partial blocks. Pure bookkeeping: it never touches KV memory; the
// caller applies the returned BlockCopy list to the cache before writing.
// Single-threaded: only the engine thread (or a test) calls it.
//
// Invariants (check_invariants() verifies them; tests call it after each op):
//  - every block is either used (ref > 0) or free (ref == 0) and then in
//    exactly one free list: the uncached stack or the cached LRU;
//  - a block is in the prefix-cache map iff it is marked cached, and the map
//    points back to it; only full, computed blocks are cached;
//  - used slots (the waste accounting) == sum of filled slots of used blocks;
//  - at idle (no live BlockTable) num_used_blocks() == 0.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"

namespace loom {

using BlockId = int32_t;

class KvManager;

// A sequence's references to KV blocks, in position order: token t of the
// sequence lives in blocks()[t / block_size] at offset t % block_size.
// Move-only; destroying (or resetting) a non-empty table returns its
// references to its manager, which must outlive it.
class BlockTable {
 public:
  BlockTable() = default;
  BlockTable(BlockTable&& other) noexcept;
  BlockTable& operator=(BlockTable&& other) noexcept;
  BlockTable(const BlockTable&) = delete;
  BlockTable& operator=(const BlockTable&) = delete;
  ~BlockTable();

  const std::vector<BlockId>& blocks() const { return blocks_; }
  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  // Token slots reserved (the sequence's tokens whose KV is, or is being, written).
  int32_t num_tokens() const { return num_tokens_; }
  bool empty() const { return blocks_.empty(); }
  // Frees every reference (no-op when empty).
  void reset();

 private:
  friend class KvManager;
  KvManager* manager_ = nullptr;
  std::vector<BlockId> blocks_;
  std::vector<BlockHash> hashes_;  // chained hashes of the first hashes_.size() full blocks
  int32_t num_tokens_ = 0;
};

struct BlockCopy {
  BlockId src = 0;
  BlockId dst = 0;
  friend bool operator==(const BlockCopy&, const BlockCopy&) = default;
};

struct KvConfig {
  int32_t num_blocks = 0;
  int32_t block_size = 16;
  bool enable_prefix_caching = true;
};

struct KvStats {
  int32_t num_blocks = 0;
  int32_t used_blocks = 0;    // ref > 0
  int32_t free_blocks = 0;    // ref == 0 (includes cached_free_blocks)
  int32_t cached_blocks = 0;  // registered in the prefix cache (used or free)
  int32_t cached_free_blocks = 0;
  int64_t allocated_slots = 0;  // used_blocks * block_size
  int64_t filled_slots = 0;     // of those, slots holding (or about to hold) a token
  int64_t prefix_queried_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t evictions = 0;
  double kv_waste() const {  // allocated slots not holding a token / allocated slots
    return allocated_slots == 0 ? 0.0
                                : double(allocated_slots - filled_slots) / double(allocated_slots);
  }
  double prefix_hit_rate() const {
    return prefix_queried_tokens == 0 ? 0.0
                                      : double(prefix_hit_tokens) / double(prefix_queried_tokens);
  }
};

class KvManager {
 public:
  explicit KvManager(KvConfig config);
  ~KvManager();
  KvManager(const KvManager&) = delete;
  KvManager& operator=(const KvManager&) = delete;

  // Blocks that fit in `budget_bytes` at `bytes_per_block` each (throws if none).
  static int32_t num_blocks_for_budget(uint64_t budget_bytes, uint64_t bytes_per_block);

  int32_t block_size() const { return config_.block_size; }
  int32_t num_blocks() const { return config_.num_blocks; }
  bool prefix_caching() const { return config_.enable_prefix_caching; }
  int32_t num_free_blocks() const;  // allocatable now (uncached free + evictable cached)
  int32_t num_used_blocks() const { return config_.num_blocks - num_free_blocks(); }
  int32_t ref_count(BlockId block) const;
  bool is_cached(BlockId block) const;
  KvStats stats() const;

  // Tokens of `tokens[0, max_tokens)` covered by cached full blocks (a peek:
  // takes no references, changes no LRU order).
  int32_t cached_prefix_tokens(std::span<const int32_t> tokens, uint64_t salt,
                               int32_t max_tokens) const;
  // On an empty table: takes references to the longest chain of cached full
  // blocks within tokens[0, max_tokens) and returns the tokens they cover
  // (a multiple of block_size). Does not count towards the hit-rate stats.
  int32_t acquire_cached_prefix(BlockTable& table, std::span<const int32_t> tokens,
                                uint64_t salt, int32_t max_tokens);
  // Hit-rate accounting: a prompt of `queried` tokens found `hit` cached.
  void note_prefix_lookup(int32_t queried, int32_t hit);

  // Free blocks reserve(table, num_tokens) would take (new blocks, plus one
  // copy when the next slot to write lies in a shared block).
  int32_t blocks_needed(const BlockTable& table, int32_t num_tokens) const;
  // Grows the table so it holds `num_tokens` slots (num_tokens >= table's).
  // If the first new slot lies in a block shared with another table, that
  // block is replaced by a private copy and the copy is appended to `copies`
  // (the caller copies the KV before writing). Returns false, changing
  // nothing, when not enough free blocks remain (evicting cached free blocks
  // LRU first as needed).
  bool reserve(BlockTable& table, int32_t num_tokens, std::vector<BlockCopy>* copies);
  // Shrinks the table to `num_tokens` slots (speculative decoding: the slots
  // of rejected draft tokens), returning blocks that no longer hold a slot.
  // num_tokens must cover every block registered in the prefix cache
  // through this table; the slots dropped lie in blocks the table holds
  // alone (reserve() made them private).
  void truncate(BlockTable& table, int32_t num_tokens);
  // After tokens[0, num_computed) have been written: registers the table's
  // newly full blocks in the prefix cache (first writer of a hash wins).
  void commit(BlockTable& table, std::span<const int32_t> tokens, int32_t num_computed,
              uint64_t salt);
  // A new table sharing every block of `src` (for n > 1 siblings).
  BlockTable fork(const BlockTable& src);
  // Returns the table's references, last block first (so a sequence's tail is
  // evicted before its prefix); the table becomes empty.
  void free(BlockTable& table);

  // Throws (LOOM_CHECK) when an invariant is broken. O(num_blocks).
  void check_invariants() const;

 private:
  struct Block {
    int32_t ref = 0;
    int32_t filled = 0;       // slots holding a token (max over the tables sharing it)
    bool cached = false;
    int32_t prev = -1;        // LRU links (cached free blocks only)
    int32_t next = -1;
    BlockHash hash;
  };

  BlockId take_free_block();  // caller checked num_free_blocks() > 0
  void release(BlockId b);
  void lru_push_back(BlockId b);
  void lru_remove(BlockId b);
  void set_filled(BlockId b, int32_t filled);
  std::optional<BlockId> lookup(const BlockHash& h, std::span<const int32_t> tokens,
                                uint64_t salt, const BlockHash& parent) const;

  KvConfig config_;
  std::vector<Block> blocks_;
  std::vector<int32_t> block_tokens_;  // [num_blocks * block_size] ids of cached blocks
  std::vector<uint64_t> block_salt_;
  std::vector<BlockHash> block_parent_;
  std::vector<BlockId> free_uncached_;  // stack
  int32_t lru_head_ = -1;               // least recently freed cached block (evicted first)
  int32_t lru_tail_ = -1;
  int32_t lru_size_ = 0;
  int32_t num_cached_ = 0;
  int64_t filled_slots_ = 0;
  int64_t prefix_queried_ = 0;
  int64_t prefix_hit_ = 0;
  int64_t evictions_ = 0;
  std::unordered_map<BlockHash, BlockId, BlockHashHasher> cache_;
};

}  // namespace loom
