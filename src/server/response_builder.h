// ResponseBuilder: the engine's StreamEvents of one HTTP generation request
// (one engine request per prompt, n sequences each) turned into OpenAI
// response bodies: SSE chunks while streaming, or one JSON body at the end.
// Choice index = prompt_index * n + sequence index. Pure; not thread-safe
// (the caller serialises events).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/api.h"
#include "server/openai_request.h"
#include "server/output_parser.h"

namespace loom::server {

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t total() const { return prompt_tokens + completion_tokens; }
};

class ResponseBuilder {
 public:
  // request and tokenizer must outlive the builder.
  ResponseBuilder(const GenerationRequest& request, const Tokenizer& tokenizer, std::string id,
                  int64_t created);

  // Applies one event of the engine request for prompts[prompt_index].
  // Streaming: returns the chunks (JSON text, without the "data: " framing)
  // this event produces; otherwise accumulates and returns nothing.
  std::vector<std::string> on_event(int32_t prompt_index, const StreamEvent& event);

  bool done() const { return prompts_done_ == int32_t(request_.prompts.size()); }
  Usage usage() const;
  // The complete non-streaming body (after done()).
  std::string final_body() const;
  // The usage-only chunk sent last when stream_options.include_usage.
  std::string usage_chunk() const;
  int64_t completion_tokens() const { return completion_tokens_; }
  const std::string& id() const { return id_; }

 private:
  struct Choice {
    std::string text;
    std::vector<int32_t> tokens;
    nlohmann::json logprobs;     // accumulated (non-streaming) in the endpoint's format
    std::string finish_reason;   // "" while running
    bool started = false;        // streaming: first chunk sent (role / echo)
    int64_t text_offset = 0;     // completions logprobs: offset of the next token
    bool seen = false;           // its first event was applied (prompt scores go with it)
    nlohmann::json prompt_logprobs;  // vLLM's prompt_logprobs (non-streaming)
    std::optional<OutputParser> parser;  // chat: reasoning / tool calls / content
  };

  nlohmann::json chunk_base() const;
  // `prompt`: the prompt's scores, for the choice's first event of an echo
  // with logprobs (completions: the prompt tokens lead the logprobs).
  nlohmann::json logprobs_json(Choice& choice, const StreamEvent& event, int32_t prompt_index,
                               bool with_prompt);
  // vLLM's prompt_logprobs list of prompt `prompt_index`: null, then per
  // token {"<id>": {"logprob", "rank", "decoded_token"}} with the top ones.
  nlohmann::json vllm_prompt_logprobs(int32_t prompt_index) const;

  // A streamed chunk whose only variable parts are the choice's text, index,
  // finish reason and (chat) role: written directly, the same bytes as the
  // JSON object's dump (keys in order), at a fraction of the cost.
  std::string plain_chunk(size_t index, const std::string& text, const std::string& finish_reason,
                          bool chat, bool first, bool with_content) const;

  const GenerationRequest& request_;
  const Tokenizer& tokenizer_;
  std::string id_;
  int64_t created_;
  std::string chunk_tail_;  // a chunk's fields after "choices" (created, id, model, ...)
  std::vector<Choice> choices_;
  int32_t prompts_done_ = 0;
  std::vector<std::vector<SampleResult>> prompt_scores_;  // by prompt, from its sequence 0
  int64_t completion_tokens_ = 0;
};

// "stop", "length", "abort", "error" ("tool_calls" is decided by the builder).
std::string finish_reason_string(FinishReason reason);

}  // namespace loom::server
