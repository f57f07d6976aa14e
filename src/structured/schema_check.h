// prepare_json_schema: rejects, by name, every JSON Schema feature that the
// grammar engine would not enforce exactly. xgrammar logs a warning and drops
// such keywords (loosening the constraint: not, if/then/else, uniqueItems,
// contains, multipleOf on numbers, allOf with several parts, oneOf whose
// branches may overlap, formats it does not know, length limits next to a
// pattern or format, keywords shadowed by $ref/const/enum/anyOf in the same
// schema); we must answer 400 instead of returning unconstrained output.
// This check is ours for that reason alone: the grammar itself is xgrammar's.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

namespace loom::structured {

// Returns the schema to compile: the same, except string formats whose
// xgrammar regex is looser than the format (ipv4, date, date-time) become
// exact patterns. Throws GrammarError (Unsupported or Invalid) naming the
// keyword and where it is, as a JSON pointer ("/properties/age: 'multipleOf'
// on a number is not supported"); TooLarge past max_depth nested schemas.
nlohmann::ordered_json prepare_json_schema(const nlohmann::ordered_json& schema, int32_t max_depth);

}  // namespace loom::structured
