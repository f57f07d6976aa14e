// Content hashes of KV blocks for automatic prefix caching. A full block is
// named by a 128-bit hash chained over (parent block's hash, the block's token
// ids, the cache salt), so equal hashes mean equal whole prefixes (collisions
// are ~2^-128 per pair; KvManager also compares the stored token ids).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace loom {

struct BlockHash {
  uint64_t lo = 0;
  uint64_t hi = 0;
  friend bool operator==(const BlockHash&, const BlockHash&) = default;
};

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const { return static_cast<size_t>(h.lo); }
};

// The parent of a sequence's first block.
inline constexpr BlockHash kRootBlockHash{0x6c6f6f6d5f6b7600ull, 0x726f6f745f626c6bull};

// Hash of one full block given its parent's hash, its tokens and the salt.
BlockHash hash_block(const BlockHash& parent, std::span<const int32_t> tokens, uint64_t salt);

// 64-bit hash of a salt string (tenant, API key...); "" gives 0 (no salt).
uint64_t hash_cache_salt(std::string_view salt);

}  // namespace loom
