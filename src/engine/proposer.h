// Proposer: speculative decoding's guess of the tokens that follow a
// sequence. The step executor asks for up to k tokens per decoding sequence
// between steps; the next step verifies them all in one forward pass (the
// accepted prefix stays, the rest is rolled back), so the model's weights are
// read once for several tokens. What is proposed never changes what is
// generated: greedy verification keeps only tokens the model would have
// chosen, and sampled verification keeps the target distribution exactly.
// Implementations: an n-gram lookup in the sequence's own tokens (no
// weights), a smaller draft model of the same vocabulary. EAGLE-style heads
// and MTP layers would be further implementations of this interface.
// Engine thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace loom {

struct Sequence;
class Proposer;

struct SpeculativeConfig {
  enum class Method : uint8_t { None, Ngram, Draft };
  Method method = Method::None;
  int32_t num_tokens = 0;  // k at most: tokens proposed per sequence and step
  int32_t ngram_min = 1;   // Ngram: the n-gram sizes tried, longest first
  int32_t ngram_max = 4;
  std::string draft_model;  // Draft: the draft model's path
  // Proposals are made only while at most this many sequences decode (0: no
  // limit). Below it, the policy (spec_policy.h) decides per sequence and
  // step from the measured step costs and acceptance.
  int32_t max_batch = 16;
  // Every proposal verified at full length, whatever it costs (benchmarks of
  // the mechanism's ceiling; the batch cap still applies).
  bool always = false;
  // Set: this proposer instead of `method`'s (tests; other proposers).
  std::shared_ptr<Proposer> custom;
  // Tests: seconds of a decode-only step of M query tokens, instead of the
  // measured ones (the policy's decisions are then deterministic).
  std::function<double(int32_t)> fixed_step_seconds;
  bool enabled() const { return num_tokens > 0 && (method != Method::None || custom != nullptr); }
};

// Jump-forward: a constrained sequence's forced tokens (TokenConstraint::
// forced_tokens: a JSON key, a tool call's fixed opening) proposed to the
// verifier like a draft, with or without a proposer. The outputs stay exactly
// those of plain decoding: the verifier keeps a forced token only where the
// model, under the constraint's mask, would have chosen it.
struct JumpForwardConfig {
  bool enabled = true;
  int32_t max_tokens = 8;  // forced tokens proposed per sequence and step, at most
};

// One sequence's proposal: the tokens, and its quality class (proposals of
// one class are accepted alike: an n-gram's match length; 0 where the
// proposer has one kind).
struct Proposal {
  std::vector<int32_t> tokens;
  int32_t quality = 0;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // For each of `seqs` (every token known; the last not yet computed), up to
  // max_tokens[i] tokens to follow it, into drafts[i] (cleared first). A
  // sequence with max_tokens[i] == 0 gets none and costs nothing.
  virtual void propose(std::span<const Sequence* const> seqs, std::span<const int32_t> max_tokens,
                       std::vector<Proposal>& drafts) = 0;
  // Whether a proposal costs next to nothing (no model pass): the policy
  // then asks every step and learns from the proposals it does not verify.
  virtual bool free_proposals() const { return false; }
  // A proposer with a KV cache of its own (a draft model): the bytes of one
  // of its blocks of block_size tokens. The engine sizes both caches from
  // one budget, with as many draft blocks as target blocks.
  virtual int64_t kv_cache_bytes_per_block(int64_t /*block_size*/, DType /*dtype*/) const { return 0; }
  virtual void allocate_kv_cache(int64_t /*num_blocks*/, int64_t /*block_size*/, DType /*dtype*/) {}
  // Between steps: the sequences still running (sorted); state kept for any
  // other sequence may be dropped.
  virtual void retain(std::span<const uint64_t> /*running*/) {}
};

// Prompt lookup: the longest n-gram (max_n down to min_n tokens) ending the
// sequence that occurred earlier in its prompt or output, and the tokens that
// followed that occurrence (the latest one); quality: the n matched.
std::unique_ptr<Proposer> make_ngram_proposer(int32_t min_n, int32_t max_n);

// The n-gram proposal for one token history (for tests and tools); returns
// the n matched (0: none).
int32_t ngram_propose(std::span<const int32_t> tokens, int32_t min_n, int32_t max_n,
                      int32_t max_tokens, std::vector<int32_t>& out);

}  // namespace loom
