// Test helpers for driving Transformer::forward through a paged KV cache
// without the engine: a shuffled block pool, per-sequence block lists, and a
// StepInput builder. Header-only; used by tests/model and tests/cuda.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "model/transformer.h"

namespace loom::testing {

// One sequence's place in the paged cache: its physical blocks (in logical
// order) and how many tokens the cache already holds.
struct PagedSequence {
  std::vector<int32_t> blocks;
  int32_t cached = 0;
};

// Hands out physical blocks in a fixed shuffled order, so a sequence's blocks
// are neither contiguous nor ascending.
class ShuffledBlockPool {
 public:
  ShuffledBlockPool(int64_t num_blocks, uint32_t seed) : free_(static_cast<size_t>(num_blocks)) {
    std::iota(free_.begin(), free_.end(), 0);
    std::shuffle(free_.begin(), free_.end(), std::mt19937(seed));
  }
  int32_t take() {
    if (free_.empty()) throw std::runtime_error("block pool exhausted");
    const int32_t b = free_.back();
    free_.pop_back();
    return b;
  }

 private:
  std::vector<int32_t> free_;
};

// A step holding, for each (sequence, new tokens) pair, the tokens appended
// after what the sequence has cached. Every new row gets logits.
inline StepInput make_paged_step(std::vector<std::pair<PagedSequence*, std::vector<int32_t>>> parts,
                                 ShuffledBlockPool& pool, int64_t block_size) {
  StepInput step;
  AttentionMetadata& m = step.attn;
  m.num_seqs = static_cast<int32_t>(parts.size());
  m.query_start.push_back(0);
  int32_t max_blocks = 0;
  for (auto& [seq, tokens] : parts) {
    const int32_t len = seq->cached + static_cast<int32_t>(tokens.size());
    while (static_cast<int64_t>(seq->blocks.size()) * block_size < len) seq->blocks.push_back(pool.take());
    max_blocks = std::max(max_blocks, static_cast<int32_t>(seq->blocks.size()));
  }
  m.max_blocks_per_seq = max_blocks;
  for (auto& [seq, tokens] : parts) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const int32_t pos = seq->cached + static_cast<int32_t>(i);
      step.logit_rows.push_back(static_cast<int32_t>(step.tokens.size()));
      step.tokens.push_back(tokens[i]);
      step.positions.push_back(pos);
      m.slot_mapping.push_back(int64_t{seq->blocks[static_cast<size_t>(pos / block_size)]} * block_size +
                               pos % block_size);
    }
    seq->cached += static_cast<int32_t>(tokens.size());
    m.query_start.push_back(static_cast<int32_t>(step.tokens.size()));
    m.context_lens.push_back(seq->cached);
    for (int32_t b = 0; b < max_blocks; ++b)
      m.block_tables.push_back(b < static_cast<int32_t>(seq->blocks.size()) ? seq->blocks[static_cast<size_t>(b)] : 0);
  }
  return step;
}

// Logits [rows, vocab] (f32 or bf16, any device) as host f32 rows.
inline std::vector<std::vector<float>> logits_to_rows(Backend& backend, const Tensor& logits) {
  std::vector<float> flat;
  copy_to_host_f32(backend, logits, flat);
  std::vector<std::vector<float>> rows;
  const int64_t vocab = logits.dim(1);
  for (int64_t r = 0; r < logits.dim(0); ++r)
    rows.emplace_back(flat.begin() + r * vocab, flat.begin() + (r + 1) * vocab);
  return rows;
}

inline int32_t argmax(const std::vector<float>& row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// Reference outputs of a fixture under tests/fixtures/models (made by
// scripts/make_model_fixtures.py with HF transformers).
struct ModelReference {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<std::vector<float>>> logits;  // [prompt][position][vocab]
  std::vector<std::vector<int32_t>> greedy;
  // [prompt][position]: max |Δlogit| of HF's own bf16 run of the model against
  // `logits` (how far bf16 rounding alone moves each row); empty when absent.
  std::vector<std::vector<float>> bf16_deviation;
  // FP8 fixtures (scripts/make_fp8_fixtures.py): the same for HF in bf16 with
  // every linear layer's input quantised to FP8 as loom quantises it (W8A8).
  std::vector<std::vector<float>> w8a8_deviation;
};

inline std::string model_fixture_dir(const std::string& name) {
  return std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

inline std::string model_fixture_path(const std::string& name) {
  const std::string dir = model_fixture_dir(name);
  return name.ends_with("_gguf") ? dir + "/model.gguf" : dir;
}

inline ModelReference load_model_reference(const std::string& name) {
  std::ifstream in(model_fixture_dir(name) + "/reference.json");
  if (!in) throw std::runtime_error("missing fixture " + name);
  const nlohmann::json j = nlohmann::json::parse(in);
  ModelReference r;
  r.prompts = j.at("prompts").get<std::vector<std::vector<int32_t>>>();
  r.logits = j.at("logits").get<std::vector<std::vector<std::vector<float>>>>();
  r.greedy = j.at("greedy").get<std::vector<std::vector<int32_t>>>();
  if (j.contains("bf16_deviation"))
    r.bf16_deviation = j.at("bf16_deviation").get<std::vector<std::vector<float>>>();
  if (j.contains("w8a8_deviation"))
    r.w8a8_deviation = j.at("w8a8_deviation").get<std::vector<std::vector<float>>>();
  return r;
}

}  // namespace loom::testing
