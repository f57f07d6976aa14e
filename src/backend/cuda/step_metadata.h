// Device copy of a step's AttentionMetadata. write_kv and paged_attention get
// the same host metadata once per layer; it is uploaded (through pinned
// memory, in one copy) only when its contents differ from the last upload, so
// a step pays one upload for all its layers. Steps with prefill sequences
// (more than one new token) also carry the work list of the flash prefill
// kernel and the list of their decode tokens (one new token), which the other
// attention kernel then covers. Internal to backend/cuda.
#pragma once

#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_util.h"

namespace loom::cuda {

struct DeviceStepMetadata {
  const int32_t* query_start = nullptr;   // [num_seqs + 1]
  const int32_t* context_lens = nullptr;  // [num_seqs]
  const int32_t* token_seq = nullptr;     // [num_tokens]: sequence index of each token
  const int32_t* block_tables = nullptr;  // [num_seqs * max_blocks_per_seq]
  const int64_t* slot_mapping = nullptr;  // [slot_mapping.size()]
  // Whether some sequence has more than one new token. Only then:
  bool has_prefill = false;
  const int32_t* decode_tokens = nullptr;  // [num_decode_tokens]: the tokens of sequences with one new token
  int32_t num_decode_tokens = 0;
};

// A step's flash prefill work list for one query-group size (see
// FlashPrefillArgs::tiles).
struct PrefillTiles {
  const int32_t* tiles = nullptr;  // device [count][2]: sequence, first row
  int32_t count = 0;
};

// Host side of the work list: sets `tiles` to the (sequence, first row) pairs
// of every sequence with more than one new token, rows being its new tokens
// times `group` query heads, block_m rows per tile. Longest first: ordered by
// decreasing keys of the tile's last row (before any sliding window, so the
// list suits every layer), ties in sequence then row order. Bounded for
// malformed metadata (sequences past query_start / context_lens are skipped,
// token ranges clamped to [0, num_tokens]).
void build_prefill_tiles(const AttentionMetadata& meta, int64_t num_tokens, int group, int block_m,
                         std::vector<int32_t>& tiles);

class StepMetadataCache {
 public:
  // Uploads and validates meta for the step now starting; until the next
  // prepare(), get() and validate() given this same object skip comparing
  // contents (the caller keeps it alive and unchanged through the step).
  void prepare(const AttentionMetadata& meta, int64_t num_tokens, int64_t block_size, int64_t num_blocks,
               cudaStream_t stream);
  // While frozen (a CUDA graph is being recorded) an upload is an error: the
  // recording would replay a stale host copy.
  void set_frozen(bool frozen) { frozen_ = frozen; }
  // The device copy of meta for a step of num_tokens tokens. Does not validate
  // meta (see validate()); token_seq is only meaningful for valid metadata.
  const DeviceStepMetadata& get(const AttentionMetadata& meta, int64_t num_tokens, cudaStream_t stream);
  // check_attention_metadata, skipped when this content was already checked
  // against the same cache geometry.
  void validate(const AttentionMetadata& meta, int64_t num_tokens, int64_t block_size, int64_t num_blocks);
  // The flash prefill tiles of this step (uploading meta first if needed) for
  // query groups of `group` heads, kFlashBlockM rows per tile. An upload packs
  // the tiles for the group size asked for last, so a model's steps normally
  // get them with the rest; another size is built and uploaded separately on
  // first use in the step (an error while frozen). Valid until the next upload.
  PrefillTiles prefill_tiles(const AttentionMetadata& meta, int64_t num_tokens, int group, cudaStream_t stream);

 private:
  bool same_as_uploaded(const AttentionMetadata& meta, int64_t num_tokens) const;
  bool is_prepared(const AttentionMetadata& meta, int64_t num_tokens) const {
    return prepared_ == &meta && num_tokens == last_tokens_ && uploaded_;
  }

  AttentionMetadata last_;
  int64_t last_tokens_ = -1;
  bool uploaded_ = false;
  bool frozen_ = false;
  const AttentionMetadata* prepared_ = nullptr;
  int64_t validated_block_size_ = -1, validated_num_blocks_ = -1;  // -1: not validated
  DeviceStepMetadata device_;
  std::vector<uint8_t> packed_;
  DeviceBuffer buffer_;
  PinnedUploader uploader_;
  // Flash prefill tiles: those packed in the last upload (group 0: none),
  // those uploaded since into extra_buffer_, and the group to pack next.
  int packed_group_ = 0, extra_group_ = 0, wanted_group_ = 0;
  PrefillTiles packed_tiles_, extra_tiles_;
  std::vector<int32_t> tiles_host_;
  DeviceBuffer extra_buffer_;
};

}  // namespace loom::cuda
