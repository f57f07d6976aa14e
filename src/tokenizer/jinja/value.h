// The template interpreter's value type: undefined, none, bool, int, float,
// string, list/tuple, dict (insertion-ordered), namespace and callable, with
// Python semantics for printing (str/repr), truthiness, equality and ordering.
// Strings, lists and dicts are shared by reference; only namespaces are ever
// mutated (the template environment is immutable, like jinja2's
// ImmutableSandboxedEnvironment), so sharing is never observable otherwise.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace loom::jinja {

class Value;
class Renderer;
struct List;
struct Dict;
struct Callable;

using ListPtr = std::shared_ptr<List>;
using DictPtr = std::shared_ptr<Dict>;
using CallablePtr = std::shared_ptr<Callable>;
using StringPtr = std::shared_ptr<const std::string>;

enum class Kind : uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,  // also tuples (List::is_tuple)
  kDict,  // also namespaces (Dict::is_namespace)
  kCallable,
};

class Value {
 public:
  Value() : kind_(Kind::kUndefined) {}
  static Value undefined(std::string name = {});
  static Value none() { return Value(Kind::kNone); }
  Value(bool b) : kind_(Kind::kBool), data_(b) {}
  Value(int64_t i) : kind_(Kind::kInt), data_(i) {}
  Value(int i) : kind_(Kind::kInt), data_(int64_t{i}) {}
  Value(double d) : kind_(Kind::kFloat), data_(d) {}
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  Value(StringPtr s) : kind_(Kind::kString), data_(std::move(s)) {}
  Value(ListPtr l) : kind_(Kind::kList), data_(std::move(l)) {}
  Value(DictPtr d) : kind_(Kind::kDict), data_(std::move(d)) {}
  Value(CallablePtr c) : kind_(Kind::kCallable), data_(std::move(c)) {}

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }  // not bool
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_mapping() const;  // a dict, not a namespace
  bool is_namespace() const;
  bool is_tuple() const;
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const;  // int or bool
  double as_double() const;  // any number
  const std::string& str() const { return *std::get<StringPtr>(data_); }
  const StringPtr& str_ptr() const { return std::get<StringPtr>(data_); }
  const ListPtr& list() const { return std::get<ListPtr>(data_); }
  const DictPtr& dict() const { return std::get<DictPtr>(data_); }
  const CallablePtr& callable() const { return std::get<CallablePtr>(data_); }
  // The name an undefined value was looked up by (for error messages).
  const std::string& undefined_name() const;

 private:
  explicit Value(Kind k) : kind_(k) {}
  Kind kind_;
  std::variant<std::monostate, bool, int64_t, double, StringPtr, ListPtr, DictPtr, CallablePtr>
      data_;
};

struct List {
  std::vector<Value> items;
  bool is_tuple = false;
};

// Insertion-ordered; lookup is linear (template dicts are small).
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  bool is_namespace = false;

  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(Value key, Value value);
};

// Arguments of a call, after evaluation.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Callable {
  std::string name;
  std::function<Value(Renderer&, CallArgs&)> fn;
};

Value make_list(std::vector<Value> items, bool is_tuple = false);
Value make_dict(DictPtr d);
Value make_callable(std::string name, std::function<Value(Renderer&, CallArgs&)> fn);

// Converts JSON to a Value; throws when nesting exceeds max_depth. An
// ordered_json keeps object keys in insertion order, as Python dicts do.
Value from_json(const nlohmann::json& j, int max_depth);
Value from_json(const nlohmann::ordered_json& j, int max_depth);

bool truthy(const Value& v);
// Python's str() (undefined prints as ""), and repr().
std::string to_str(const Value& v);
std::string repr(const Value& v);
// Python ==, and ordering (<); ordering throws on incomparable types.
bool equals(const Value& a, const Value& b, int depth = 0);
bool less_than(const Value& a, const Value& b, int depth = 0);
// Python type name, for messages ("str", "int", "dict", ...).
std::string type_name(const Value& v);

struct JsonOptions {
  bool ensure_ascii = false;
  bool sort_keys = false;
  bool has_indent = false;
  std::string indent;  // the string repeated per level when has_indent
  std::string item_separator = ", ";
  std::string key_separator = ": ";
};
// Python's json.dumps; throws for values JSON cannot hold. `max_bytes` bounds
// the result (throws when exceeded), `max_depth` the nesting.
std::string to_json(const Value& v, const JsonOptions& options, size_t max_bytes, int max_depth);

// Python's repr(float): shortest round-trip digits, "1.0", "1e+16", "inf".
std::string format_float(double d);

}  // namespace loom::jinja
