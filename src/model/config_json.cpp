#include "model/config_json.h"

#include <cmath>

#include "core/error.h"

namespace loom {

namespace {

// A short rendering of an offending value for error messages.
std::string show(const nlohmann::json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

}  // namespace

ConfigJson::ConfigJson(const nlohmann::json& object, std::string context)
    : object_(&object), context_(std::move(context)) {
  if (!object_->is_object()) LOOM_THROW("{}: expected a JSON object, got {}", context_, show(*object_));
}

const nlohmann::json* ConfigJson::find(std::string_view key) const {
  auto it = object_->find(std::string(key));
  if (it == object_->end() || it->is_null()) return nullptr;
  return &*it;
}

void ConfigJson::fail(std::string_view key, std::string_view what) const {
  const nlohmann::json* v = find(key);
  if (v) LOOM_THROW("{}: '{}' {}, got {}", context_, key, what, show(*v));
  LOOM_THROW("{}: '{}' {}", context_, key, what);
}

std::optional<int64_t> ConfigJson::optional_integer(std::string_view key, int64_t lo, int64_t hi) const {
  const nlohmann::json* v = find(key);
  if (!v) return std::nullopt;
  int64_t out = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail(key, fmt::format("must be an integer in [{}, {}]", lo, hi));
    out = v->get<int64_t>();
  } else if (v->is_number_float()) {
    const double d = v->get<double>();
    if (!(std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18)) fail(key, "must be an integer");
    out = static_cast<int64_t>(d);
  } else {
    fail(key, "must be an integer");
  }
  if (out < lo || out > hi) fail(key, fmt::format("must be an integer in [{}, {}]", lo, hi));
  return out;
}

int64_t ConfigJson::integer(std::string_view key, int64_t lo, int64_t hi) const {
  auto v = optional_integer(key, lo, hi);
  if (!v) fail(key, "is required");
  return *v;
}

int64_t ConfigJson::integer(std::string_view key, int64_t fallback, int64_t lo, int64_t hi) const {
  return optional_integer(key, lo, hi).value_or(fallback);
}

std::optional<double> ConfigJson::optional_number(std::string_view key, double lo, double hi) const {
  const nlohmann::json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_number()) fail(key, "must be a number");
  const double d = v->get<double>();
  if (!(std::isfinite(d) && d >= lo && d <= hi)) fail(key, fmt::format("must be a number in [{}, {}]", lo, hi));
  return d;
}

double ConfigJson::number(std::string_view key, double fallback, double lo, double hi) const {
  return optional_number(key, lo, hi).value_or(fallback);
}

bool ConfigJson::boolean(std::string_view key, bool fallback) const {
  const nlohmann::json* v = find(key);
  if (!v) return fallback;
  if (!v->is_boolean()) fail(key, "must be true or false");
  return v->get<bool>();
}

std::string ConfigJson::string(std::string_view key, std::string_view fallback) const {
  const nlohmann::json* v = find(key);
  if (!v) return std::string(fallback);
  if (!v->is_string()) fail(key, "must be a string");
  return v->get<std::string>();
}

std::optional<ConfigJson> ConfigJson::object(std::string_view key) const {
  const nlohmann::json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_object()) fail(key, "must be an object");
  return ConfigJson(*v, fmt::format("{} '{}'", context_, key));
}

}  // namespace loom
