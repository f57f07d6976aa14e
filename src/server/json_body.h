// Parsing an untrusted JSON request body within bounds: size, valid UTF-8,
// and nesting depth (checked by a linear pre-scan before nlohmann's recursive
// parser sees the text, so deep input cannot exhaust the stack).
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string_view>

namespace loom::server {

// Deepest nesting of arrays/objects in `text`, scanning strings correctly;
// stops counting (returns limit + 1) as soon as `limit` is exceeded.
int json_nesting_depth(std::string_view text, int limit);

// Throws ApiError: 413 over max_bytes, 400 for invalid UTF-8, nesting deeper
// than max_depth, malformed JSON, or a top level that is not an object.
// Objects keep the client's key order (chat templates print tool calls and
// tool schemas with tojson, which must match what the model was trained on).
nlohmann::ordered_json parse_json_body(std::string_view body, size_t max_bytes, int max_depth);

}  // namespace loom::server
