// StepOutput: what one forward step produced for the scheduler to apply
// (Scheduler::update_from_output): the new tokens of every sequence the step
// sampled, and the pooled hidden states of pooling sequences. Plain data, built by the StepExecutor
// on the engine thread.
#pragma once

#include <boost/container/small_vector.hpp>
#include <cstdint>
#include <vector>

#include "engine/api.h"
#include "engine/pooling.h"

namespace loom {

struct SequenceTokens {
  SeqId seq = 0;
  // The sequence's new tokens, in order: one per step, or, when the step
  // finishes an n > 1 prompt, one per sibling (index 0 is the sequence
  // itself, then the siblings it forks, by index). One inline: a decode
  // step's row allocates nothing.
  boost::container::small_vector<SampleResult, 1> tokens;
};

// SamplingParams::prompt_logprobs of one sequence's prompt chunk: the
// logprobs of prompt tokens [first, first + entries.size()).
struct PromptLogprobs {
  SeqId seq = 0;
  int32_t first = 0;
  std::vector<SampleResult> entries;
};

struct StepOutput {
  enum class Kind : uint8_t {
    Tokens,        // the plan's step is computed and these are its tokens
    Placeholders,  // the plan's step is computed; its tokens are still being chosen on
                   // the device: token -(r + 1) names row r of the step's device ids
    Resolutions,   // the real tokens of an earlier Placeholders output (no plan)
  };
  Kind kind = Kind::Tokens;
  std::vector<SequenceTokens> rows;  // in the step's sampled-row order
  std::vector<PromptLogprobs> prompt_logprobs;  // Kind Tokens only
  std::vector<PooledRows> pooled;               // pooling sequences' rows (Tokens or Placeholders)
};

}  // namespace loom
