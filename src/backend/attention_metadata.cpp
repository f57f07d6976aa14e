// Validation of AttentionMetadata, shared by every backend: the metadata comes
// from the engine, but a wrong block id would read or write outside the cache.
#include "backend/backend.h"
#include "core/error.h"

namespace loom {

void check_attention_metadata(const AttentionMetadata& meta, int64_t num_tokens, int64_t block_size,
                              int64_t num_blocks) {
  const int ns = meta.num_seqs;
  LOOM_CHECK(block_size > 0, "block size must be > 0");
  LOOM_CHECK(ns >= 0 && meta.query_start.size() == static_cast<size_t>(ns) + 1,
             "query_start must have num_seqs + 1 = {} entries", ns + 1);
  LOOM_CHECK(meta.context_lens.size() == static_cast<size_t>(ns), "context_lens must have {} entries", ns);
  LOOM_CHECK(meta.query_start[0] == 0 && meta.query_start[ns] == num_tokens,
             "query_start must run from 0 to the {} tokens of the step", num_tokens);
  LOOM_CHECK(meta.max_blocks_per_seq >= 0 &&
                 meta.block_tables.size() >= static_cast<size_t>(ns) * meta.max_blocks_per_seq,
             "block_tables must hold num_seqs * max_blocks_per_seq entries");
  for (int s = 0; s < ns; ++s) {
    const int64_t n_new = static_cast<int64_t>(meta.query_start[s + 1]) - meta.query_start[s];
    const int64_t ctx = meta.context_lens[s];
    LOOM_CHECK(n_new >= 0 && ctx >= n_new, "sequence {}: {} new tokens but context length {}", s, n_new,
               ctx);
    LOOM_CHECK(meta.max_context_bound <= 0 || ctx <= meta.max_context_bound,
               "sequence {}: context length {} exceeds the step's bound {}", s, ctx, meta.max_context_bound);
    const int64_t blocks = (ctx + block_size - 1) / block_size;
    LOOM_CHECK(blocks <= meta.max_blocks_per_seq, "sequence {}: context {} needs {} blocks > {}", s, ctx,
               blocks, meta.max_blocks_per_seq);
    for (int64_t b = 0; b < blocks; ++b) {
      const int32_t id = meta.block_tables[static_cast<size_t>(s) * meta.max_blocks_per_seq + b];
      LOOM_CHECK(id >= 0 && id < num_blocks, "sequence {}: block id {} out of range [0, {})", s, id,
                 num_blocks);
    }
  }
}

}  // namespace loom
