// POST /v1/embeddings (OpenAI, with vLLM's extensions): the body -> a
// validated EmbeddingRequest (one engine pooling request per input), and the
// vectors -> the response body. Pure (no I/O); every rejection is an
// ApiError naming the field. Unknown fields are ignored; null counts as
// absent. Thread-safe (the model context is read-only).
//
// input: a string, a list of strings, a list of token ids, or a list of
// token-id lists; each non-empty, at most the model's context (after
// truncate_prompt_tokens), within RequestLimits' count and total tokens.
// encoding_format: "float" (default) or "base64" (little-endian float32
// bytes). dimensions: refused (no Matryoshka truncation for these models).
// vLLM's add_special_tokens (default true), truncate_prompt_tokens (keep the
// last k tokens; -1: the context length), normalize (default true) and
// priority are honoured; user is bounded and kept for the log.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/openai_request.h"

namespace loom::server {

struct EmbeddingRequest {
  std::string model;                         // as the response reports it
  std::vector<std::vector<int32_t>> inputs;  // one engine request each, by index
  bool base64 = false;
  bool normalize = true;
  int32_t priority = 0;
  std::string user;
  int64_t prompt_tokens() const;  // over every input
};

EmbeddingRequest parse_embedding_request(const nlohmann::ordered_json& body,
                                         const ModelContext& model, const RequestLimits& limits);

// {"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
// "model", "usage": {"prompt_tokens", "total_tokens"}}; vectors by input index.
std::string embedding_response_body(const EmbeddingRequest& request,
                                    const std::vector<std::vector<float>>& vectors);

// Standard base64 (RFC 4648, padded) of the vector's little-endian float32 bytes.
std::string base64_floats(const std::vector<float>& v);

}  // namespace loom::server
