// StepMetadataCache (see step_metadata.h). Layout of the device buffer, each
// array starting at a multiple of 16 bytes: query_start | context_lens |
// token_seq | block_tables | slot_mapping.
#include "backend/cuda/step_metadata.h"

#include <algorithm>
#include <cstring>

namespace loom::cuda {
namespace {

size_t round16(size_t n) { return (n + 15) / 16 * 16; }

}  // namespace

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
  const size_t off_qs = 0;
  const size_t off_ctx = off_qs + round16(meta.query_start.size() * 4);
  const size_t off_seq = off_ctx + round16(meta.context_lens.size() * 4);
  const size_t off_bt = off_seq + round16(nt * 4);
  const size_t off_slots = off_bt + round16(meta.block_tables.size() * 4);
  const size_t total = off_slots + round16(meta.slot_mapping.size() * 8);
  packed_.assign(total, 0);
  auto copy = [&](size_t off, const auto& v) {
    if (!v.empty()) std::memcpy(packed_.data() + off, v.data(), v.size() * sizeof(v[0]));
  };
  copy(off_qs, meta.query_start);
  copy(off_ctx, meta.context_lens);
  copy(off_bt, meta.block_tables);
  copy(off_slots, meta.slot_mapping);
  // token -> sequence, bounded so malformed metadata cannot write out of range
  // (paged_attention validates before it relies on it).
  auto* seq = reinterpret_cast<int32_t*>(packed_.data() + off_seq);
  if (meta.query_start.size() >= ns + 1)
    for (size_t s = 0; s < ns; ++s) {
      const int64_t b = std::clamp<int64_t>(meta.query_start[s], 0, static_cast<int64_t>(nt));
      const int64_t e = std::clamp<int64_t>(meta.query_start[s + 1], 0, static_cast<int64_t>(nt));
      for (int64_t t = b; t < e; ++t) seq[t] = static_cast<int32_t>(s);
    }
  auto* dev = static_cast<uint8_t*>(buffer_.ensure(total, stream));
  uploader_.upload(dev, packed_.data(), total, stream);
  device_.query_start = reinterpret_cast<const int32_t*>(dev + off_qs);
  device_.context_lens = reinterpret_cast<const int32_t*>(dev + off_ctx);
  device_.token_seq = reinterpret_cast<const int32_t*>(dev + off_seq);
  device_.block_tables = reinterpret_cast<const int32_t*>(dev + off_bt);
  device_.slot_mapping = reinterpret_cast<const int64_t*>(dev + off_slots);
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

}  // namespace loom::cuda
