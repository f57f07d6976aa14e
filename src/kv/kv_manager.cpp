// KvManager: block pool, reference counts, prefix cache and copy-on-write.
// See kv_manager.h for the invariants; check_invariants() is their executable form.
#include "kv/kv_manager.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace loom {

// ---------------------------------------------------------------- BlockTable

BlockTable::BlockTable(BlockTable&& other) noexcept
    : manager_(other.manager_),
      blocks_(std::move(other.blocks_)),
      hashes_(std::move(other.hashes_)),
      num_tokens_(other.num_tokens_) {
  other.blocks_.clear();
  other.hashes_.clear();
  other.num_tokens_ = 0;
}

BlockTable& BlockTable::operator=(BlockTable&& other) noexcept {
  if (this != &other) {
    reset();
    manager_ = other.manager_;
    blocks_ = std::move(other.blocks_);
    hashes_ = std::move(other.hashes_);
    num_tokens_ = other.num_tokens_;
    other.blocks_.clear();
    other.hashes_.clear();
    other.num_tokens_ = 0;
  }
  return *this;
}

BlockTable::~BlockTable() { reset(); }

void BlockTable::reset() {
  if (manager_ != nullptr && !blocks_.empty()) manager_->free(*this);
  blocks_.clear();
  hashes_.clear();
  num_tokens_ = 0;
}

// ----------------------------------------------------------------- KvManager

KvManager::KvManager(KvConfig config) : config_(config) {
  LOOM_CHECK(config_.num_blocks > 0, "KV pool needs at least one block (got {})",
             config_.num_blocks);
  LOOM_CHECK(config_.block_size > 0 && config_.block_size <= 4096,
             "block size must be in [1, 4096] (got {})", config_.block_size);
  blocks_.resize(config_.num_blocks);
  free_uncached_.reserve(config_.num_blocks);
  // Stack: block 0 is handed out first.
  for (int32_t b = config_.num_blocks - 1; b >= 0; --b) free_uncached_.push_back(b);
  if (config_.enable_prefix_caching) {
    block_tokens_.resize(size_t(config_.num_blocks) * size_t(config_.block_size));
    block_salt_.resize(config_.num_blocks);
    block_parent_.resize(config_.num_blocks);
    cache_.reserve(size_t(config_.num_blocks));
  }
}

KvManager::~KvManager() = default;

int32_t KvManager::num_blocks_for_budget(uint64_t budget_bytes, uint64_t bytes_per_block) {
  LOOM_CHECK(bytes_per_block > 0, "bytes per KV block must be positive");
  uint64_t n = budget_bytes / bytes_per_block;
  if (n == 0) {
    LOOM_THROW("KV cache budget of {} bytes holds no block of {} bytes", budget_bytes,
               bytes_per_block);
  }
  return static_cast<int32_t>(std::min<uint64_t>(n, uint64_t(INT32_MAX)));
}

int32_t KvManager::num_free_blocks() const {
  return static_cast<int32_t>(free_uncached_.size()) + lru_size_;
}

int32_t KvManager::ref_count(BlockId block) const {
  LOOM_CHECK(block >= 0 && block < config_.num_blocks, "block {} out of range", block);
  return blocks_[block].ref;
}

bool KvManager::is_cached(BlockId block) const {
  LOOM_CHECK(block >= 0 && block < config_.num_blocks, "block {} out of range", block);
  return blocks_[block].cached;
}

KvStats KvManager::stats() const {
  KvStats s;
  s.num_blocks = config_.num_blocks;
  s.free_blocks = num_free_blocks();
  s.used_blocks = config_.num_blocks - s.free_blocks;
  s.cached_blocks = num_cached_;
  s.cached_free_blocks = lru_size_;
  s.allocated_slots = int64_t(s.used_blocks) * config_.block_size;
  s.filled_slots = filled_slots_;
  s.prefix_queried_tokens = prefix_queried_;
  s.prefix_hit_tokens = prefix_hit_;
  s.evictions = evictions_;
  return s;
}

void KvManager::lru_push_back(BlockId b) {
  Block& blk = blocks_[b];
  blk.prev = lru_tail_;
  blk.next = -1;
  if (lru_tail_ >= 0) blocks_[lru_tail_].next = b; else lru_head_ = b;
  lru_tail_ = b;
  ++lru_size_;
}

void KvManager::lru_remove(BlockId b) {
  Block& blk = blocks_[b];
  if (blk.prev >= 0) blocks_[blk.prev].next = blk.next; else lru_head_ = blk.next;
  if (blk.next >= 0) blocks_[blk.next].prev = blk.prev; else lru_tail_ = blk.prev;
  blk.prev = blk.next = -1;
  --lru_size_;
}

void KvManager::set_filled(BlockId b, int32_t filled) {
  Block& blk = blocks_[b];
  filled_slots_ += filled - blk.filled;
  blk.filled = filled;
}

BlockId KvManager::take_free_block() {
  BlockId b;
  if (!free_uncached_.empty()) {
    b = free_uncached_.back();
    free_uncached_.pop_back();
  } else {
    LOOM_CHECK(lru_head_ >= 0, "KV pool exhausted (caller must check num_free_blocks)");
    b = lru_head_;
    lru_remove(b);
    Block& blk = blocks_[b];
    cache_.erase(blk.hash);
    blk.cached = false;
    --num_cached_;
    ++evictions_;
  }
  Block& blk = blocks_[b];
  LOOM_CHECK(blk.ref == 0 && blk.filled == 0, "free block {} has ref {} filled {}", b, blk.ref,
             blk.filled);
  blk.ref = 1;
  return b;
}

void KvManager::release(BlockId b) {
  LOOM_CHECK(b >= 0 && b < config_.num_blocks, "block {} out of range", b);
  Block& blk = blocks_[b];
  LOOM_CHECK(blk.ref > 0, "double free of KV block {}", b);
  if (--blk.ref > 0) return;
  set_filled(b, 0);
  if (blk.cached) lru_push_back(b); else free_uncached_.push_back(b);
}

std::optional<BlockId> KvManager::lookup(const BlockHash& h, std::span<const int32_t> tokens,
                                         uint64_t salt, const BlockHash& parent) const {
  auto it = cache_.find(h);
  if (it == cache_.end()) return std::nullopt;
  BlockId b = it->second;
  const int32_t bs = config_.block_size;
  if (block_salt_[b] != salt || !(block_parent_[b] == parent) ||
      !std::equal(tokens.begin(), tokens.end(), block_tokens_.begin() + size_t(b) * bs)) {
    return std::nullopt;  // a 128-bit collision: treat as a miss
  }
  return b;
}

int32_t KvManager::cached_prefix_tokens(std::span<const int32_t> tokens, uint64_t salt,
                                        int32_t max_tokens) const {
  if (!config_.enable_prefix_caching) return 0;
  const int32_t bs = config_.block_size;
  max_tokens = std::min<int32_t>(max_tokens, static_cast<int32_t>(tokens.size()));
  BlockHash parent = kRootBlockHash;
  int32_t n = 0;
  while (n + bs <= max_tokens) {
    auto block_tokens = tokens.subspan(n, bs);
    BlockHash h = hash_block(parent, block_tokens, salt);
    if (!lookup(h, block_tokens, salt, parent)) break;
    parent = h;
    n += bs;
  }
  return n;
}

int32_t KvManager::acquire_cached_prefix(BlockTable& table, std::span<const int32_t> tokens,
                                         uint64_t salt, int32_t max_tokens) {
  LOOM_CHECK(table.empty() && table.num_tokens_ == 0, "prefix lookup needs an empty table");
  if (!config_.enable_prefix_caching) return 0;
  LOOM_CHECK(table.manager_ == nullptr || table.manager_ == this, "table of another pool");
  table.manager_ = this;
  const int32_t bs = config_.block_size;
  max_tokens = std::min<int32_t>(max_tokens, static_cast<int32_t>(tokens.size()));
  BlockHash parent = kRootBlockHash;
  int32_t n = 0;
  while (n + bs <= max_tokens) {
    auto block_tokens = tokens.subspan(n, bs);
    BlockHash h = hash_block(parent, block_tokens, salt);
    auto b = lookup(h, block_tokens, salt, parent);
    if (!b) break;
    Block& blk = blocks_[*b];
    if (blk.ref == 0) lru_remove(*b);
    ++blk.ref;
    set_filled(*b, bs);
    table.blocks_.push_back(*b);
    table.hashes_.push_back(h);
    parent = h;
    n += bs;
  }
  table.num_tokens_ = n;
  return n;
}

void KvManager::note_prefix_lookup(int32_t queried, int32_t hit) {
  prefix_queried_ += queried;
  prefix_hit_ += hit;
}

int32_t KvManager::blocks_needed(const BlockTable& table, int32_t num_tokens) const {
  const int32_t bs = config_.block_size;
  const int32_t cur = table.num_tokens_;
  if (num_tokens <= cur) return 0;
  int32_t want = (num_tokens + bs - 1) / bs;
  int32_t n = std::max<int32_t>(0, want - table.num_blocks());
  if (cur % bs != 0 && blocks_[table.blocks_[cur / bs]].ref > 1) ++n;  // copy-on-write
  return n;
}

bool KvManager::reserve(BlockTable& table, int32_t num_tokens, std::vector<BlockCopy>* copies) {
  const int32_t bs = config_.block_size;
  const int32_t cur = table.num_tokens_;
  LOOM_CHECK(num_tokens >= cur, "cannot shrink a block table ({} -> {} tokens)", cur,
             num_tokens);
  LOOM_CHECK(table.manager_ == nullptr || table.manager_ == this, "table of another pool");
  if (num_tokens == cur) return true;
  if (blocks_needed(table, num_tokens) > num_free_blocks()) return false;
  table.manager_ = this;
  if (cur % bs != 0) {
    const int32_t idx = cur / bs;
    const BlockId old = table.blocks_[idx];
    if (blocks_[old].ref > 1) {
      LOOM_CHECK(copies != nullptr, "copy-on-write needed but no copy list given");
      BlockId fresh = take_free_block();
      set_filled(fresh, cur - idx * bs);
      copies->push_back(BlockCopy{old, fresh});
      table.blocks_[idx] = fresh;
      release(old);
    }
  }
  const int32_t want = (num_tokens + bs - 1) / bs;
  while (table.num_blocks() < want) table.blocks_.push_back(take_free_block());
  for (int32_t j = cur / bs; j < want; ++j) {
    const BlockId b = table.blocks_[j];
    set_filled(b, std::max(blocks_[b].filled, std::min(bs, num_tokens - j * bs)));
  }
  table.num_tokens_ = num_tokens;
  return true;
}

void KvManager::truncate(BlockTable& table, int32_t num_tokens) {
  const int32_t bs = config_.block_size;
  LOOM_CHECK(num_tokens >= 0 && num_tokens <= table.num_tokens_, "truncate of a {}-slot table to {}",
             table.num_tokens_, num_tokens);
  LOOM_CHECK(num_tokens >= static_cast<int32_t>(table.hashes_.size()) * bs,
             "truncate to {} slots would cut a cached block ({} cached)", num_tokens,
             table.hashes_.size() * size_t(bs));
  if (num_tokens == table.num_tokens_) return;
  const int32_t want = (num_tokens + bs - 1) / bs;
  while (table.num_blocks() > want) {
    const BlockId b = table.blocks_.back();
    LOOM_CHECK(blocks_[b].ref == 1, "truncate would drop shared block {}", b);
    table.blocks_.pop_back();
    release(b);
  }
  if (want > 0 && num_tokens % bs != 0) {
    const BlockId b = table.blocks_[size_t(want - 1)];
    if (blocks_[b].ref == 1) set_filled(b, num_tokens - (want - 1) * bs);
  }
  table.num_tokens_ = num_tokens;
}

void KvManager::commit(BlockTable& table, std::span<const int32_t> tokens, int32_t num_computed,
                       uint64_t salt) {
  if (!config_.enable_prefix_caching) return;
  LOOM_CHECK(num_computed <= table.num_tokens_ &&
                 num_computed <= static_cast<int32_t>(tokens.size()),
             "commit of {} tokens, table holds {}, sequence has {}", num_computed,
             table.num_tokens_, tokens.size());
  const int32_t bs = config_.block_size;
  for (int32_t i = static_cast<int32_t>(table.hashes_.size()); (i + 1) * bs <= num_computed;
       ++i) {
    const BlockHash parent = i == 0 ? kRootBlockHash : table.hashes_[i - 1];
    auto block_tokens = tokens.subspan(size_t(i) * bs, bs);
    const BlockHash h = hash_block(parent, block_tokens, salt);
    table.hashes_.push_back(h);
    const BlockId b = table.blocks_[i];
    Block& blk = blocks_[b];
    if (blk.cached || cache_.count(h) != 0) continue;  // already cached, or a duplicate
    blk.cached = true;
    blk.hash = h;
    ++num_cached_;
    cache_.emplace(h, b);
    std::copy(block_tokens.begin(), block_tokens.end(), block_tokens_.begin() + size_t(b) * bs);
    block_salt_[b] = salt;
    block_parent_[b] = parent;
  }
}

BlockTable KvManager::fork(const BlockTable& src) {
  LOOM_CHECK(src.manager_ == nullptr || src.manager_ == this, "table of another pool");
  BlockTable t;
  t.manager_ = this;
  t.blocks_ = src.blocks_;
  t.hashes_ = src.hashes_;
  t.num_tokens_ = src.num_tokens_;
  for (BlockId b : t.blocks_) {
    LOOM_CHECK(blocks_[b].ref > 0, "fork of a table holding free block {}", b);
    ++blocks_[b].ref;
  }
  return t;
}

void KvManager::free(BlockTable& table) {
  LOOM_CHECK(table.manager_ == nullptr || table.manager_ == this, "table of another pool");
  for (auto it = table.blocks_.rbegin(); it != table.blocks_.rend(); ++it) release(*it);
  table.blocks_.clear();
  table.hashes_.clear();
  table.num_tokens_ = 0;
}

void KvManager::check_invariants() const {
  const int32_t n = config_.num_blocks;
  std::vector<uint8_t> seen(n, 0);
  for (BlockId b : free_uncached_) {
    LOOM_CHECK(b >= 0 && b < n && !seen[b], "free list holds block {} twice or out of range", b);
    seen[b] = 1;
    LOOM_CHECK(blocks_[b].ref == 0 && !blocks_[b].cached, "uncached free block {} ref {}", b,
               blocks_[b].ref);
  }
  int32_t lru_count = 0;
  BlockId prev = -1;
  for (BlockId b = lru_head_; b >= 0; b = blocks_[b].next) {
    LOOM_CHECK(b < n && !seen[b], "LRU holds block {} twice or out of range", b);
    seen[b] = 1;
    LOOM_CHECK(blocks_[b].ref == 0 && blocks_[b].cached, "LRU block {} ref {} cached {}", b,
               blocks_[b].ref, blocks_[b].cached);
    LOOM_CHECK(blocks_[b].prev == prev, "LRU back link of block {}", b);
    prev = b;
    ++lru_count;
  }
  LOOM_CHECK(prev == lru_tail_ && lru_count == lru_size_, "LRU size {} != {}", lru_count,
             lru_size_);
  int64_t filled = 0;
  int32_t cached = 0;
  for (BlockId b = 0; b < n; ++b) {
    const Block& blk = blocks_[b];
    LOOM_CHECK(blk.ref >= 0, "block {} has negative ref {}", b, blk.ref);
    LOOM_CHECK((blk.ref == 0) == (seen[b] != 0), "block {} ref {} but free-listed {}", b, blk.ref,
               seen[b]);
    LOOM_CHECK(blk.filled >= 0 && blk.filled <= config_.block_size, "block {} filled {}", b,
               blk.filled);
    LOOM_CHECK(blk.ref > 0 || blk.filled == 0, "free block {} filled {}", b, blk.filled);
    filled += blk.filled;
    if (blk.cached) {
      ++cached;
      auto it = cache_.find(blk.hash);
      LOOM_CHECK(it != cache_.end() && it->second == b, "cached block {} not in the map", b);
    }
  }
  LOOM_CHECK(filled == filled_slots_, "filled slots {} != {}", filled, filled_slots_);
  LOOM_CHECK(cached == num_cached_ && size_t(cached) == cache_.size(),
             "cached blocks {} / {} / map {}", cached, num_cached_, cache_.size());
}

}  // namespace loom
