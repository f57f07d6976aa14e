// Parsing an untrusted JSON request body within bounds: size, valid UTF-8,
// nesting depth (checked by a linear pre-scan before the parser sees the
// text, so deep input cannot exhaust the stack) and time. The cost is linear
// in the body: objects are built with a key index (nlohmann's ordered_json
// inserts by a linear scan, which made N distinct keys cost O(N^2)).
#pragma once

#include <chrono>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

namespace loom::server {

// Deepest nesting of arrays/objects in `text`, scanning strings correctly;
// stops counting (returns limit + 1) as soon as `limit` is exceeded.
int json_nesting_depth(std::string_view text, int limit);

// Throws ApiError: 413 over max_bytes, 400 for invalid UTF-8, nesting deeper
// than max_depth, malformed JSON, a top level that is not an object, or a
// parse still running at `deadline`. Objects keep the client's key order
// (chat templates print tool calls and tool schemas with tojson, which must
// match what the model was trained on); a repeated key keeps its first
// position and its last value.
nlohmann::ordered_json parse_json_body(
    std::string_view body, size_t max_bytes, int max_depth,
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());

// JSON carried as text inside a body (a JSON Schema or tool-call arguments
// sent as a string), parsed at the same linear cost: any JSON value, nullopt
// when the text is not valid JSON or nests deeper than max_depth.
std::optional<nlohmann::ordered_json> parse_json_text(std::string_view text, int max_depth = 64);

}  // namespace loom::server
