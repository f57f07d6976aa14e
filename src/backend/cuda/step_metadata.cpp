// StepMetadataCache (see step_metadata.h). Layout of the device buffer, each
// array starting at a multiple of 16 bytes: slot_mapping | query_start |
// context_lens | token_seq | block_tables, then for steps with a prefill
// sequence: decode_tokens | flash prefill tiles (for wanted_group_, if set).
// A step of decodes only uploads exactly the first five. slot_mapping comes
// first so that its address depends only on the buffer: recorded pieces of a
// step (which write K/V through it) are keyed by the token count alone, while
// the sequences and block-table width behind them change.
#include "backend/cuda/step_metadata.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "backend/cuda/kernels/kernels.h"

namespace loom::cuda {
namespace {

size_t round16(size_t n) { return (n + 15) / 16 * 16; }

// Token range [b, e) of sequence s, clamped to [0, num_tokens] (query_start
// holds at least s + 2 entries).
std::pair<int64_t, int64_t> token_range(const AttentionMetadata& meta, size_t s, int64_t num_tokens) {
  const int64_t b = std::clamp<int64_t>(meta.query_start[s], 0, num_tokens);
  const int64_t e = std::clamp<int64_t>(meta.query_start[s + 1], 0, num_tokens);
  return {b, std::max(b, e)};
}

}  // namespace

void build_prefill_tiles(const AttentionMetadata& meta, int64_t num_tokens, int group, int block_m,
                         std::vector<int32_t>& tiles) {
  tiles.clear();
  if (group <= 0 || block_m <= 0 || meta.num_seqs <= 0) return;
  const size_t ns = static_cast<size_t>(meta.num_seqs);
  if (meta.query_start.size() < ns + 1 || meta.context_lens.size() < ns) return;
  const int64_t nt = std::max<int64_t>(num_tokens, 0);
  struct Tile {
    int64_t keys;  // keys of the tile's last row (causal, no window)
    int32_t seq, row0;
  };
  std::vector<Tile> list;
  for (size_t s = 0; s < ns; ++s) {
    const auto [b, e] = token_range(meta, s, nt);
    const int64_t n_new = e - b;
    if (n_new <= 1) continue;
    const int64_t rows = n_new * group;
    const int64_t first_pos = static_cast<int64_t>(meta.context_lens[s]) - n_new;
    for (int64_t r = 0; r < rows && r <= INT32_MAX; r += block_m) {
      const int64_t last = std::min(rows, r + block_m) - 1;
      list.push_back({first_pos + last / group + 1, static_cast<int32_t>(s), static_cast<int32_t>(r)});
    }
  }
  std::stable_sort(list.begin(), list.end(), [](const Tile& x, const Tile& y) { return x.keys > y.keys; });
  tiles.reserve(2 * list.size());
  for (const Tile& t : list) {
    tiles.push_back(t.seq);
    tiles.push_back(t.row0);
  }
}

bool StepMetadataCache::same_as_uploaded(const AttentionMetadata& meta, int64_t num_tokens) const {
  if (is_prepared(meta, num_tokens)) return true;
  return uploaded_ && num_tokens == last_tokens_ && meta.num_seqs == last_.num_seqs &&
         meta.max_blocks_per_seq == last_.max_blocks_per_seq && meta.query_start == last_.query_start &&
         meta.context_lens == last_.context_lens && meta.slot_mapping == last_.slot_mapping &&
         meta.block_tables == last_.block_tables;
}

const DeviceStepMetadata& StepMetadataCache::get(const AttentionMetadata& meta, int64_t num_tokens,
                                                 cudaStream_t stream) {
  if (same_as_uploaded(meta, num_tokens)) return device_;
  LOOM_CHECK(!frozen_, "attention metadata changed while a step is being recorded");
  prepared_ = nullptr;
  const size_t ns = static_cast<size_t>(std::max(meta.num_seqs, 0));
  const size_t nt = static_cast<size_t>(std::max<int64_t>(num_tokens, 0));
  const size_t off_slots = 0;
  const size_t off_qs = off_slots + round16(meta.slot_mapping.size() * 8);
  const size_t off_ctx = off_qs + round16(meta.query_start.size() * 4);
  const size_t off_seq = off_ctx + round16(meta.context_lens.size() * 4);
  const size_t off_bt = off_seq + round16(nt * 4);
  // Prefill sequences (more than one new token) and decode tokens.
  bool has_prefill = false;
  size_t num_decode = 0;
  if (meta.query_start.size() >= ns + 1)
    for (size_t s = 0; s < ns; ++s) {
      const auto [b, e] = token_range(meta, s, static_cast<int64_t>(nt));
      if (e - b > 1) has_prefill = true;
      if (e - b == 1) ++num_decode;
    }
  tiles_host_.clear();
  if (has_prefill && wanted_group_ > 0)
    build_prefill_tiles(meta, num_tokens, wanted_group_, kFlashBlockM, tiles_host_);
  const size_t off_decode = off_bt + round16(meta.block_tables.size() * 4);
  const size_t off_tiles = off_decode + (has_prefill ? round16(num_decode * 4) : 0);
  const size_t total = off_tiles + round16(tiles_host_.size() * 4);
  packed_.assign(total, 0);
  auto copy = [&](size_t off, const auto& v) {
    if (!v.empty()) std::memcpy(packed_.data() + off, v.data(), v.size() * sizeof(v[0]));
  };
  copy(off_qs, meta.query_start);
  copy(off_ctx, meta.context_lens);
  copy(off_bt, meta.block_tables);
  copy(off_slots, meta.slot_mapping);
  copy(off_tiles, tiles_host_);
  // token -> sequence, bounded so malformed metadata cannot write out of range
  // (paged_attention validates before it relies on it).
  auto* seq = reinterpret_cast<int32_t*>(packed_.data() + off_seq);
  auto* decode = reinterpret_cast<int32_t*>(packed_.data() + off_decode);
  if (meta.query_start.size() >= ns + 1)
    for (size_t s = 0, d = 0; s < ns; ++s) {
      const auto [b, e] = token_range(meta, s, static_cast<int64_t>(nt));
      for (int64_t t = b; t < e; ++t) seq[t] = static_cast<int32_t>(s);
      if (has_prefill && e - b == 1) decode[d++] = static_cast<int32_t>(b);
    }
  auto* dev = static_cast<uint8_t*>(buffer_.ensure(total, stream));
  uploader_.upload(dev, packed_.data(), total, stream);
  device_.query_start = reinterpret_cast<const int32_t*>(dev + off_qs);
  device_.context_lens = reinterpret_cast<const int32_t*>(dev + off_ctx);
  device_.token_seq = reinterpret_cast<const int32_t*>(dev + off_seq);
  device_.block_tables = reinterpret_cast<const int32_t*>(dev + off_bt);
  device_.slot_mapping = reinterpret_cast<const int64_t*>(dev + off_slots);
  device_.has_prefill = has_prefill;
  device_.decode_tokens = has_prefill ? reinterpret_cast<const int32_t*>(dev + off_decode) : nullptr;
  device_.num_decode_tokens = has_prefill ? static_cast<int32_t>(num_decode) : 0;
  packed_group_ = has_prefill ? wanted_group_ : 0;
  packed_tiles_ = {reinterpret_cast<const int32_t*>(dev + off_tiles), static_cast<int32_t>(tiles_host_.size() / 2)};
  extra_group_ = 0;
  last_ = meta;
  last_tokens_ = num_tokens;
  uploaded_ = true;
  validated_block_size_ = validated_num_blocks_ = -1;
  return device_;
}

void StepMetadataCache::prepare(const AttentionMetadata& meta, int64_t num_tokens, int64_t block_size,
                                int64_t num_blocks, cudaStream_t stream) {
  prepared_ = nullptr;
  validate(meta, num_tokens, block_size, num_blocks);  // before any kernel reads through the block tables
  get(meta, num_tokens, stream);
  validated_block_size_ = block_size;
  validated_num_blocks_ = num_blocks;
  prepared_ = &meta;
}

void StepMetadataCache::validate(const AttentionMetadata& meta, int64_t num_tokens, int64_t block_size,
                                 int64_t num_blocks) {
  if (same_as_uploaded(meta, num_tokens) && validated_block_size_ == block_size &&
      validated_num_blocks_ == num_blocks)
    return;
  check_attention_metadata(meta, num_tokens, block_size, num_blocks);
  if (same_as_uploaded(meta, num_tokens)) {
    validated_block_size_ = block_size;
    validated_num_blocks_ = num_blocks;
  }
}

PrefillTiles StepMetadataCache::prefill_tiles(const AttentionMetadata& meta, int64_t num_tokens, int group,
                                              cudaStream_t stream) {
  if (!get(meta, num_tokens, stream).has_prefill || group <= 0) return {};
  if (group == packed_group_) return packed_tiles_;
  if (group == extra_group_) return extra_tiles_;
  LOOM_CHECK(!frozen_, "flash prefill tiles requested while a step is being recorded");
  build_prefill_tiles(meta, num_tokens, group, kFlashBlockM, tiles_host_);
  const size_t bytes = tiles_host_.size() * 4;
  auto* dev = static_cast<int32_t*>(extra_buffer_.ensure(std::max<size_t>(bytes, 16), stream));
  if (bytes) uploader_.upload(dev, tiles_host_.data(), bytes, stream);
  extra_group_ = group;
  extra_tiles_ = {dev, static_cast<int32_t>(tiles_host_.size() / 2)};
  wanted_group_ = group;  // the next upload packs this size
  return extra_tiles_;
}

}  // namespace loom::cuda
