// Bounded JSON body parsing.
#include "server/json_body.h"

#include <fmt/format.h>

#include "server/api_error.h"
#include "tokenizer/unicode.h"

namespace loom::server {

int json_nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '[':
      case '{':
        if (++depth > deepest) {
          deepest = depth;
          if (deepest > limit) return limit + 1;
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default: break;
    }
  }
  return deepest;
}

nlohmann::ordered_json parse_json_body(std::string_view body, size_t max_bytes, int max_depth) {
  if (body.size() > max_bytes)
    throw ApiError(413, fmt::format("request body of {} bytes exceeds the limit of {} bytes",
                                    body.size(), max_bytes));
  if (!tok::utf8_is_valid(body)) throw ApiError(400, "request body is not valid UTF-8");
  if (json_nesting_depth(body, max_depth) > max_depth)
    throw ApiError(400, fmt::format("JSON nesting deeper than {} levels", max_depth));
  auto j = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw ApiError(400, "request body is not valid JSON");
  if (!j.is_object()) throw ApiError(400, "request body must be a JSON object");
  return j;
}

}  // namespace loom::server
