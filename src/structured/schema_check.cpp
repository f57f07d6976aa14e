// The walk over a JSON schema that finds what xgrammar would drop. Mirrors
// the dispatch order of xgrammar's schema parser ($ref, const, enum, anyOf,
// oneOf, allOf, then type): in one schema object, the first of these that is
// present is the only thing it enforces.
#include "structured/schema_check.h"

#include <fmt/format.h>

#include <array>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "structured/grammar_error.h"

namespace loom::structured {

using json = nlohmann::ordered_json;

namespace {

// Formats xgrammar turns into a regex; any other is not enforced.
constexpr std::array<std::string_view, 14> kFormats = {
    "email", "date",          "time",         "date-time",    "duration",
    "ipv4",  "ipv6",          "hostname",     "json-pointer", "relative-json-pointer",
    "uri",   "uri-reference", "uri-template", "uuid"};

// Keywords no part of the engine enforces.
constexpr std::array<std::string_view, 12> kUnsupported = {"not",
                                                           "if",
                                                           "then",
                                                           "else",
                                                           "dependentRequired",
                                                           "dependentSchemas",
                                                           "dependencies",
                                                           "contains",
                                                           "minContains",
                                                           "maxContains",
                                                           "$dynamicRef",
                                                           "$recursiveRef"};

// Keywords that constrain a value by its type (shadowed by $ref/const/enum/anyOf/...).
constexpr std::array<std::string_view, 25> kTypeKeywords = {"type",
                                                            "properties",
                                                            "required",
                                                            "additionalProperties",
                                                            "patternProperties",
                                                            "propertyNames",
                                                            "minProperties",
                                                            "maxProperties",
                                                            "unevaluatedProperties",
                                                            "items",
                                                            "prefixItems",
                                                            "minItems",
                                                            "maxItems",
                                                            "unevaluatedItems",
                                                            "minLength",
                                                            "maxLength",
                                                            "pattern",
                                                            "format",
                                                            "minimum",
                                                            "maximum",
                                                            "exclusiveMinimum",
                                                            "exclusiveMaximum",
                                                            "multipleOf",
                                                            "uniqueItems",
                                                            "additionalItems"};

// xgrammar's dispatch order.
constexpr std::array<std::string_view, 6> kDispatch = {"$ref",  "const", "enum",
                                                       "anyOf", "oneOf", "allOf"};

template <size_t N>
bool contains(const std::array<std::string_view, N>& set, std::string_view s) {
  for (auto v : set)
    if (v == s) return true;
  return false;
}

[[noreturn]] void unsupported(const std::string& where, const std::string& what) {
  throw GrammarError(GrammarError::Kind::Unsupported,
                     fmt::format("{}: {}", where.empty() ? "/" : where, what));
}
[[noreturn]] void invalid(const std::string& where, const std::string& what) {
  throw GrammarError(GrammarError::Kind::Invalid,
                     fmt::format("{}: {}", where.empty() ? "/" : where, what));
}

std::string pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

// The JSON types a schema's "type" allows (empty: any).
std::set<std::string> types_of(const json& schema) {
  std::set<std::string> out;
  auto it = schema.find("type");
  if (it == schema.end()) return out;
  if (it->is_string())
    out.insert(it->get<std::string>());
  else if (it->is_array())
    for (const auto& t : *it)
      if (t.is_string()) out.insert(t.get<std::string>());
  return out;
}

bool value_has_type(const json& v, const std::set<std::string>& types) {
  if (types.empty()) return true;
  auto has = [&](const char* t) { return types.count(t) != 0; };
  switch (v.type()) {
    case json::value_t::null:
      return has("null");
    case json::value_t::boolean:
      return has("boolean");
    case json::value_t::string:
      return has("string");
    case json::value_t::array:
      return has("array");
    case json::value_t::object:
      return has("object");
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return has("integer") || has("number");
    case json::value_t::number_float:
      return has("number") ||
             (has("integer") && v.get<double>() == double(int64_t(v.get<double>())));
    default:
      return false;
  }
}

// The finite values a branch's property may take (const / enum), if any.
bool finite_values(const json& prop, std::vector<json>* out) {
  if (!prop.is_object()) return false;
  if (auto c = prop.find("const"); c != prop.end()) {
    out->push_back(*c);
    return true;
  }
  if (auto e = prop.find("enum"); e != prop.end() && e->is_array()) {
    for (const auto& v : *e) out->push_back(v);
    return true;
  }
  return false;
}

// oneOf is exact only when no value can match two branches. Proven here the
// way xgrammar proves it (distinct single types, or a required discriminator
// property with disjoint const/enum values); otherwise it would silently be
// treated as anyOf.
bool one_of_disjoint(const json& options) {
  if (options.size() <= 1) return true;
  for (const auto& o : options)
    if (!o.is_object() || o.contains("$ref") || o.contains("anyOf") || o.contains("oneOf") ||
        o.contains("allOf"))
      return false;
  std::set<std::string> seen;
  bool distinct_types = true;
  for (const auto& o : options) {
    auto t = o.find("type");
    if (t == o.end() || !t->is_string() || !seen.insert(t->get<std::string>()).second ||
        o.contains("const") || o.contains("enum")) {
      distinct_types = false;
      break;
    }
  }
  if (distinct_types && !(seen.count("integer") && seen.count("number"))) return true;
  // Discriminator: a key required by every branch, with disjoint finite values.
  const json& first = options.front();
  if (!first.contains("required") || !first["required"].is_array()) return false;
  for (const auto& key_value : first["required"]) {
    if (!key_value.is_string()) continue;
    const std::string key = key_value.get<std::string>();
    std::vector<std::vector<json>> values;
    bool ok = true;
    for (const auto& o : options) {
      std::vector<json> v;
      const bool required =
          o.contains("required") && o["required"].is_array() &&
          std::find(o["required"].begin(), o["required"].end(), key_value) != o["required"].end();
      if (!required || !o.contains("properties") || !o["properties"].is_object() ||
          !o["properties"].contains(key) || !finite_values(o["properties"][key], &v)) {
        ok = false;
        break;
      }
      values.push_back(std::move(v));
    }
    if (!ok) continue;
    bool disjoint = true;
    for (size_t i = 0; i < values.size() && disjoint; ++i)
      for (size_t j = i + 1; j < values.size() && disjoint; ++j)
        for (const auto& a : values[i])
          for (const auto& b : values[j])
            if (a == b) disjoint = false;
    if (disjoint) return true;
  }
  return false;
}

// Formats whose xgrammar regex accepts more than the format allows (ipv4
// with leading zeros such as 01.2.3.4; dates such as 2023-02-30; JSON
// pointers, whose format regex is matched against the raw JSON text and so
// lets an unescaped " or control character through), as exact patterns:
// years 0001-9999, days per month, February 29 in leap years only, no leap
// seconds (which validators reject); a
// pattern is matched against the decoded string and JSON-escaped.
std::optional<std::string> exact_format_pattern(const std::string& format) {
  const std::string octet = "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
  const std::string year = "([0-9]{3}[1-9]|[0-9]{2}[1-9][0-9]|[0-9][1-9][0-9]{2}|[1-9][0-9]{3})";
  const std::string leap =
      "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)";
  const std::string date = "(" + year + "-(0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|" + year +
                           "-(0[469]|11)-(0[1-9]|[12][0-9]|30)|" + year +
                           "-02-(0[1-9]|1[0-9]|2[0-8])|" + leap + "-02-29)";
  const std::string time =
      "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9]"
      ")";
  const std::string pointer = "(/([^/~]|~[01])*)*";
  if (format == "json-pointer") return "^" + pointer + "$";
  if (format == "relative-json-pointer") return "^(0|[1-9][0-9]*)(#|" + pointer + ")$";
  if (format == "ipv4") return "^(" + octet + "\\.){3}" + octet + "$";
  if (format == "date") return "^" + date + "$";
  if (format == "time") return "^" + time + "$";
  if (format == "date-time") return "^" + date + "T" + time + "$";
  return std::nullopt;
}

class SchemaChecker {
 public:
  SchemaChecker(const json& root, int32_t max_depth) : root_(root), max_depth_(max_depth) {}

  void check(json& s, const std::string& where, int depth) {
    if (depth > max_depth_)
      throw GrammarError(
          GrammarError::Kind::TooLarge,
          fmt::format("{}: the schema nests deeper than {} levels", where, max_depth_));
    if (s.is_boolean()) {
      if (!s.get<bool>()) unsupported(where, "the schema 'false' matches no value");
      return;
    }
    if (!s.is_object()) invalid(where, "a schema must be an object or a boolean");
    for (const auto& [key, value] : s.items()) {
      if (contains(kUnsupported, key))
        unsupported(where, fmt::format("'{}' is not supported", key));
      if (key == "uniqueItems" && value.is_boolean() && value.get<bool>())
        unsupported(where, "'uniqueItems': true is not supported");
    }
    check_dispatch(s, where);
    check_type_keywords(s, where);
    recurse(s, where, depth);
  }

 private:
  void check_dispatch(const json& s, const std::string& where) {
    std::string_view chosen;
    for (auto k : kDispatch)
      if (s.contains(std::string(k))) {
        chosen = k;
        break;
      }
    if (chosen.empty()) return;
    // What the chosen keyword would shadow.
    bool after = false;
    for (auto k : kDispatch) {
      if (k == chosen) {
        after = true;
        continue;
      }
      if (after && s.contains(std::string(k)))
        unsupported(where,
                    fmt::format("'{}' next to '{}' in one schema is not supported", k, chosen));
    }
    const bool finite = chosen == "const" || chosen == "enum";
    for (const auto& [key, value] : s.items()) {
      if (!contains(kTypeKeywords, key)) continue;
      if (finite && key == "type") continue;  // checked against the values below
      unsupported(where,
                  fmt::format("'{}' next to '{}' in one schema is not supported", key, chosen));
    }
    if (chosen == "$ref") {
      const json& ref = s["$ref"];
      if (!ref.is_string()) invalid(where, "'$ref' must be a string");
      const std::string uri = ref.get<std::string>();
      if (uri != "#" && uri.rfind("#/", 0) != 0)
        unsupported(where, fmt::format("'$ref': '{}' is not supported (only references into this "
                                       "schema: '#' or '#/...')",
                                       uri.substr(0, 200)));
      if (uri.find('~') != std::string::npos || uri.find('%') != std::string::npos)
        unsupported(where, "'$ref' with escaped characters (~, %) is not supported");
      if (uri != "#") {
        const json* target = &root_;
        size_t pos = 2;
        while (pos <= uri.size()) {
          const size_t next = std::min(uri.find('/', pos), uri.size());
          const std::string part = uri.substr(pos, next - pos);
          pos = next + 1;
          if (part.empty()) continue;
          if (!target->is_object() || !target->contains(part))
            invalid(where, fmt::format("'$ref': '{}' does not resolve", uri.substr(0, 200)));
          target = &(*target)[part];
        }
      }
    } else if (finite) {
      const std::set<std::string> types = types_of(s);
      if (chosen == "enum") {
        const json& e = s["enum"];
        if (!e.is_array() || e.empty()) invalid(where, "'enum' must be a non-empty list");
        for (const auto& v : e)
          if (!value_has_type(v, types))
            invalid(where,
                    fmt::format("enum value {} does not match 'type'", v.dump().substr(0, 100)));
      } else if (!value_has_type(s["const"], types)) {
        invalid(where, "'const' does not match 'type'");
      }
    } else if (chosen == "anyOf" || chosen == "oneOf" || chosen == "allOf") {
      const json& opts = s[std::string(chosen)];
      if (!opts.is_array() || opts.empty())
        invalid(where, fmt::format("'{}' must be a non-empty list", chosen));
      if (chosen == "allOf" && opts.size() > 1)
        unsupported(where, "'allOf' with more than one schema is not supported");
      if (chosen == "oneOf" && !one_of_disjoint(opts))
        unsupported(where,
                    "'oneOf' whose branches may overlap is not supported (a value matching "
                    "two would be accepted); use anyOf, or give each branch a distinct "
                    "type or a required const/enum discriminator property");
    }
  }

  void check_type_keywords(json& s, const std::string& where) {
    const std::set<std::string> types = types_of(s);
    const bool may_be_number =
        types.empty() ? s.contains("minimum") || s.contains("maximum") || s.contains("multipleOf")
                      : types.count("number") != 0;
    if (auto m = s.find("multipleOf"); m != s.end()) {
      if (may_be_number) unsupported(where, "'multipleOf' on a number is not supported");
      if (!m->is_number() || m->get<double>() <= 0) invalid(where, "'multipleOf' must be > 0");
      const double v = m->get<double>();
      if (v != double(int64_t(v)) || v > 1024)
        unsupported(where, "'multipleOf' on an integer must be a whole number <= 1024");
    }
    if (auto f = s.find("format");
        f != s.end() && f->is_string() && (types.empty() || types.count("string"))) {
      const std::string fmt_name = f->get<std::string>();
      if (s.contains("pattern"))
        unsupported(where, "'format' next to 'pattern' is not supported (the format would win)");
      if (auto exact = exact_format_pattern(fmt_name)) {
        s.erase("format");
        s["pattern"] = *exact;
      } else if (!contains(kFormats, fmt_name))
        unsupported(where, fmt::format("string format '{}' is not supported (supported: email, "
                                       "date, time, date-time, duration, ipv4, ipv6, hostname, "
                                       "uri, uri-reference, uri-template, uuid, json-pointer, "
                                       "relative-json-pointer)",
                                       fmt_name.substr(0, 64)));
    }
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    if (lengths && s.contains("pattern") && !s.contains("format"))
      unsupported(where,
                  "'minLength'/'maxLength' next to 'pattern' is not supported (put the "
                  "length into the pattern)");
    if (lengths && s.contains("format") && (types.empty() || types.count("string")))
      unsupported(where, "'minLength'/'maxLength' next to 'format' is not supported");
    if (auto p = s.find("pattern"); p != s.end() && !p->is_string())
      invalid(where, "'pattern' must be a string");
    // A required property the object cannot contain.
    if (auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) invalid(where, "'required' must be a list");
      const json* props = s.contains("properties") ? &s["properties"] : nullptr;
      for (const auto& name : *r) {
        if (!name.is_string()) invalid(where, "'required' must list strings");
        if (!props || !props->is_object() || !props->contains(name.get<std::string>()))
          unsupported(where, fmt::format("required property '{}' is not listed in 'properties'",
                                         name.get<std::string>().substr(0, 100)));
      }
    }
  }

  void recurse(json& s, const std::string& where, int depth) {
    auto each_value = [&](const char* key) {
      auto it = s.find(key);
      if (it == s.end()) return;
      if (!it->is_object()) invalid(where, fmt::format("'{}' must be an object", key));
      for (auto& [name, sub] : it->items())
        check(sub, where + "/" + key + "/" + pointer_token(name), depth + 1);
    };
    auto one = [&](const char* key) {
      auto it = s.find(key);
      if (it != s.end() && (it->is_object() || it->is_boolean()))
        if (!(it->is_boolean() && (std::string_view(key) == "additionalProperties" ||
                                   std::string_view(key) == "items" ||
                                   std::string_view(key) == "unevaluatedProperties" ||
                                   std::string_view(key) == "unevaluatedItems")))
          check(*it, where + "/" + key, depth + 1);
    };
    auto each_item = [&](const char* key) {
      auto it = s.find(key);
      if (it == s.end()) return;
      if (!it->is_array()) invalid(where, fmt::format("'{}' must be a list", key));
      for (size_t i = 0; i < it->size(); ++i)
        check((*it)[i], fmt::format("{}/{}/{}", where, key, i), depth + 1);
    };
    each_value("properties");
    each_value("patternProperties");
    each_value("$defs");
    each_value("definitions");
    one("additionalProperties");
    one("unevaluatedProperties");
    one("propertyNames");
    one("items");
    one("unevaluatedItems");
    each_item("prefixItems");
    each_item("anyOf");
    each_item("oneOf");
    each_item("allOf");
  }

  const json& root_;
  int32_t max_depth_;
};

}  // namespace

json prepare_json_schema(const json& schema, int32_t max_depth) {
  json out = schema;
  SchemaChecker(schema, max_depth).check(out, "", 0);
  return out;
}

}  // namespace loom::structured
