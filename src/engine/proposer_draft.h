// Draft-model proposer: a smaller model of the target's vocabulary, on the
// same backend, proposes each sequence's next k tokens greedily, one draft
// forward pass per token (all proposing sequences batched in each pass).
// It keeps a paged KV cache of its own (as many blocks as the target's, sized
// from the same budget) and per sequence the tokens that cache holds: before
// proposing, the draft catches up on the tokens it has not seen (the prompt
// the first time; then the accepted drafts and the target's own token) and
// drops what the target rejected. One rank only. Engine thread only.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/proposer.h"

namespace loom {

class Transformer;

// `draft` must outlive the proposer and its vocabulary must not be larger
// than the target's (`target_vocab`). One draft pass takes at most
// `max_step_tokens` tokens: a long prompt is caught up over several steps.
std::unique_ptr<Proposer> make_draft_proposer(Transformer& draft, int64_t target_vocab, int32_t max_step_tokens);

}  // namespace loom
