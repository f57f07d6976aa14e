// Two independent 64-bit lanes of a multiply-xorshift ("mum", as in wyhash)
// absorber with a splitmix64 finaliser: strong avalanche, fast, no tables.
#include "kv/block_hash.h"

#include <cstring>

namespace loom {
namespace {

constexpr uint64_t kSecret[4] = {0xa0761d6478bd642full, 0xe7037ed1a0b428dbull,
                                 0x8ebc6af09c88c6e3ull, 0x589965cc75374cc3ull};

inline uint64_t mum(uint64_t a, uint64_t b) {
  __uint128_t r = static_cast<__uint128_t>(a) * b;
  return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
}

inline uint64_t fmix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

struct Lane {
  uint64_t h;
  uint64_t k0;
  uint64_t k1;
  void absorb(uint64_t w) { h = mum(h ^ k0, w ^ k1) + w; }
  uint64_t finish(uint64_t len) const { return fmix(h ^ mum(len ^ k0, k1)); }
};

}  // namespace

BlockHash hash_block(const BlockHash& parent, std::span<const int32_t> tokens, uint64_t salt) {
  Lane a{parent.lo ^ 0x243f6a8885a308d3ull, kSecret[0], kSecret[1]};
  Lane b{parent.hi ^ 0x13198a2e03707344ull, kSecret[2], kSecret[3]};
  auto absorb = [&](uint64_t w) {
    a.absorb(w);
    b.absorb(w);
  };
  absorb(parent.lo);
  absorb(parent.hi);
  absorb(salt);
  size_t i = 0;
  for (; i + 1 < tokens.size(); i += 2) {
    absorb(static_cast<uint32_t>(tokens[i]) |
           (static_cast<uint64_t>(static_cast<uint32_t>(tokens[i + 1])) << 32));
  }
  if (i < tokens.size()) absorb(static_cast<uint32_t>(tokens[i]) | (1ull << 63));
  return BlockHash{a.finish(tokens.size()), b.finish(tokens.size() + 0x9e3779b97f4a7c15ull)};
}

uint64_t hash_cache_salt(std::string_view salt) {
  if (salt.empty()) return 0;
  Lane a{0x452821e638d01377ull, kSecret[1], kSecret[2]};
  size_t i = 0;
  for (; i + 8 <= salt.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, salt.data() + i, 8);
    a.absorb(w);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, salt.data() + i, salt.size() - i);
  a.absorb(tail ^ (static_cast<uint64_t>(salt.size() - i) << 59));
  uint64_t h = a.finish(salt.size());
  return h == 0 ? 1 : h;
}

}  // namespace loom
