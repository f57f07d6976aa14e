// OpenAI /v1/completions and /v1/chat/completions bodies -> validated
// generation requests. Pure (no I/O); every rejection is an ApiError naming
// the field. Unknown fields are ignored; null counts as absent. Thread-safe
// (the model context is read-only).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampling_params.h"
#include "server/structured_request.h"

namespace loom {
class Tokenizer;
class ChatFormatter;
}  // namespace loom

namespace loom::server {

// Bounds on what a client can make large.
struct RequestLimits {
  size_t max_body_bytes = size_t(4) << 20;
  int max_json_depth = 64;
  int32_t max_n = 16;                 // n (and prompts * n: max_choices)
  int32_t max_choices = 64;
  int32_t max_prompts = 32;           // entries of a batched completions prompt
  int32_t max_tokens = 32768;         // per sequence, besides the context length
  int32_t max_logprobs = 20;
  int32_t max_stop = 16;
  size_t max_stop_bytes = 256;
  int32_t max_logit_bias = 1024;
  int32_t max_messages = 1024;
  size_t max_user_bytes = 256;
};

// What parsing needs to know about the served model.
struct ModelContext {
  std::string name;                   // the served model id; "" accepts any
  std::vector<std::string> aliases;   // more ids it answers to (--served-model-name A B)
  const Tokenizer* tokenizer = nullptr;   // required
  const ChatFormatter* chat = nullptr;    // null: chat completions unavailable
  int32_t max_model_len = 0;          // prompt + generated tokens per sequence
  int32_t vocab_size = 0;
  // name, then the aliases.
  std::vector<std::string> served_names() const;
  // Whether a request may name the model so.
  bool serves(const std::string& id) const;
  ToolCallFormat tool_format = *tool_call_format("hermes");  // how the model writes tool calls
  std::optional<ReasoningFormat> reasoning;  // set: <think> sections go to reasoning_content
  structured::SpecLimits spec_limits;
};

enum class Endpoint : uint8_t { Completions, ChatCompletions };

struct GenerationRequest {
  Endpoint endpoint = Endpoint::Completions;
  std::string model;                         // as the response reports it
  std::vector<std::vector<int32_t>> prompts; // one engine request each; choices prompt-major
  std::vector<std::string> prompt_texts;     // decoded prompts (echo), parallel to prompts
  SamplingParams params;
  int32_t priority = 0;
  bool stream = false;
  bool include_usage = false;                // stream_options.include_usage
  bool echo = false;                         // completions: output starts with the prompt
  bool logprobs = false;                     // return logprobs (params.logprobs: top count)
  // vLLM's prompt_logprobs: each choice carries the prompt tokens' scores
  // with this many top alternatives (params.prompt_logprobs scores them).
  std::optional<int32_t> prompt_logprobs;
  std::string user;
  OutputStructure structure;                 // response_format, guided_*, tools
  // Parsing the output (chat): tool calls in this format when tools are active;
  // reasoning sections when the model reasons (started: the prompt opened one).
  std::optional<ToolCallFormat> tool_parser;
  std::optional<ReasoningFormat> reasoning;
  bool reasoning_started = false;
  int64_t prompt_tokens() const;             // over every prompt
  int32_t num_choices() const { return int32_t(prompts.size()) * params.n; }
};

// body: the raw request body (checked for size, UTF-8 and depth first).
GenerationRequest parse_completion_request(std::string_view body, const ModelContext& model,
                                           const RequestLimits& limits);
GenerationRequest parse_chat_request(std::string_view body, const ModelContext& model,
                                     const RequestLimits& limits);

// Both endpoints, from an already parsed body.
GenerationRequest parse_generation_request(Endpoint endpoint, const nlohmann::ordered_json& body,
                                           const ModelContext& model, const RequestLimits& limits);

}  // namespace loom::server
