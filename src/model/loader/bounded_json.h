// JSON parsing for untrusted model-side files (safetensors headers, index
// files): nesting depth, number of values and duplicate object keys are
// checked while parsing, so a hostile document fails fast with loom::Error.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace loom {

struct JsonLimits {
  int max_depth = 4;             // nested objects/arrays, the top level counting as 1
  size_t max_values = 1u << 22;  // scalar values and keys, whole document
};

// Parses `text`; errors start with `label` ("model.safetensors: ...").
nlohmann::json parse_bounded_json(std::string_view text, const std::string& label, JsonLimits limits);

}  // namespace loom
