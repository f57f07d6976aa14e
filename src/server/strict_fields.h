// OpenAI request fields loom does not implement, and the enum-valued fields:
// a request that uses an unimplemented feature (suffix, best_of > n) or
// gives an enum a value loom does not know (response_format.type,
// tool_choice, reasoning_effort, service_tier) is refused with a 400 naming
// the field, never served as if the field were absent. Unknown field *names*
// stay ignored, as OpenAI's API does. Pure; thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include "server/openai_request.h"

namespace loom::server {

// Throws ApiError (400, param = the field) for the first offending field.
void check_strict_fields(Endpoint endpoint, const nlohmann::ordered_json& body);

}  // namespace loom::server
