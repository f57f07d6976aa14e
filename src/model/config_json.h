// ConfigJson: typed, range-checked reads from one object of an untrusted
// config.json. Every failure is a loom::Error naming the file context and the
// key ("config.json: 'hidden_size' must be an integer, got \"64\"").
// A key whose value is JSON null counts as absent (HF writes null for "none").
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace loom {

class ConfigJson {
 public:
  // `object` must outlive this view; `context` prefixes error messages.
  ConfigJson(const nlohmann::json& object, std::string context);

  const std::string& context() const { return context_; }
  const nlohmann::json& json() const { return *object_; }

  // The value of `key`, or nullptr when absent or null.
  const nlohmann::json* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Integers: JSON integers, or floats holding a whole number; in [lo, hi].
  int64_t integer(std::string_view key, int64_t lo, int64_t hi) const;  // required
  int64_t integer(std::string_view key, int64_t fallback, int64_t lo, int64_t hi) const;
  std::optional<int64_t> optional_integer(std::string_view key, int64_t lo, int64_t hi) const;
  // Finite numbers in [lo, hi].
  double number(std::string_view key, double fallback, double lo, double hi) const;
  std::optional<double> optional_number(std::string_view key, double lo, double hi) const;
  bool boolean(std::string_view key, bool fallback) const;
  std::string string(std::string_view key, std::string_view fallback) const;
  // A nested object (nullopt when absent or null; error when another type).
  std::optional<ConfigJson> object(std::string_view key) const;

  [[noreturn]] void fail(std::string_view key, std::string_view what) const;

 private:
  const nlohmann::json* object_;
  std::string context_;
};

}  // namespace loom
