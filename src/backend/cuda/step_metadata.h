// Device copy of a step's AttentionMetadata. write_kv and paged_attention get
// the same host metadata once per layer; it is uploaded (through pinned
// memory, in one copy) only when its contents differ from the last upload, so
// a step pays one upload for all its layers. Internal to backend/cuda.
#pragma once

#include "backend/backend.h"
#include "backend/cuda/cuda_util.h"

namespace loom::cuda {

struct DeviceStepMetadata {
  const int32_t* query_start = nullptr;   // [num_seqs + 1]
  const int32_t* context_lens = nullptr;  // [num_seqs]
  const int32_t* token_seq = nullptr;     // [num_tokens]: sequence index of each token
  const int32_t* block_tables = nullptr;  // [num_seqs * max_blocks_per_seq]
  const int64_t* slot_mapping = nullptr;  // [slot_mapping.size()]
};

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
};

}  // namespace loom::cuda
