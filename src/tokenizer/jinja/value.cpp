// Value construction, conversions and Python-compatible printing (see value.h).
#include "tokenizer/jinja/value.h"

#include "core/error.h"
#include "tokenizer/jinja/pystr.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace loom::jinja {

namespace {
// Printing and comparing recurse into nested values; a namespace can hold
// itself, so recursion is bounded.
constexpr int kMaxValueDepth = 512;

void check_depth(int depth) {
  if (depth > kMaxValueDepth) LOOM_THROW("value nested too deeply (or contains itself)");
}
}  // namespace

Value Value::undefined(std::string name) {
  Value v;
  v.data_ = std::make_shared<const std::string>(std::move(name));
  return v;
}

Value::Value(std::string s)
    : kind_(Kind::kString), data_(std::make_shared<const std::string>(std::move(s))) {}

bool Value::is_mapping() const { return is_dict() && !dict()->is_namespace; }
bool Value::is_namespace() const { return is_dict() && dict()->is_namespace; }
bool Value::is_tuple() const { return is_list() && list()->is_tuple; }

int64_t Value::as_int() const {
  if (is_bool()) return as_bool() ? 1 : 0;
  return std::get<int64_t>(data_);
}

double Value::as_double() const {
  if (is_float()) return std::get<double>(data_);
  return static_cast<double>(as_int());
}

const std::string& Value::undefined_name() const {
  static const std::string kEmpty;
  if (auto* p = std::get_if<StringPtr>(&data_)) return **p;
  return kEmpty;
}

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : items)
    if (equals(k, key)) return &v;
  return nullptr;
}

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.str() == key) return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

Value make_list(std::vector<Value> items, bool is_tuple) {
  auto l = std::make_shared<List>();
  l->items = std::move(items);
  l->is_tuple = is_tuple;
  return Value(std::move(l));
}

Value make_dict(DictPtr d) { return Value(std::move(d)); }

Value make_callable(std::string name, std::function<Value(Renderer&, CallArgs&)> fn) {
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->fn = std::move(fn);
  return Value(std::move(c));
}

namespace {
template <typename Json>
Value json_to_value(const Json& j, int max_depth) {
  if (max_depth < 0) LOOM_THROW("template context nested too deeply");
  switch (j.type()) {
    case nlohmann::detail::value_t::null:
      return Value::none();
    case nlohmann::detail::value_t::boolean:
      return Value(j.template get<bool>());
    case nlohmann::detail::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case nlohmann::detail::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::detail::value_t::number_float:
      return Value(j.template get<double>());
    case nlohmann::detail::value_t::string:
      return Value(j.template get<std::string>());
    case nlohmann::detail::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(json_to_value(e, max_depth - 1));
      return make_list(std::move(items));
    }
    case nlohmann::detail::value_t::object: {
      auto d = std::make_shared<Dict>();
      d->items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it)
        d->items.emplace_back(Value(it.key()), json_to_value(it.value(), max_depth - 1));
      return make_dict(std::move(d));
    }
    default:
      LOOM_THROW("unsupported JSON value in template context");
  }
}
}  // namespace

Value from_json(const nlohmann::json& j, int max_depth) { return json_to_value(j, max_depth); }
Value from_json(const nlohmann::ordered_json& j, int max_depth) {
  return json_to_value(j, max_depth);
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return v.as_bool();
    case Kind::kInt:
      return v.as_int() != 0;
    case Kind::kFloat:
      return v.as_double() != 0.0;
    case Kind::kString:
      return !v.str().empty();
    case Kind::kList:
      return !v.list()->items.empty();
    case Kind::kDict:
      return v.is_namespace() || !v.dict()->items.empty();
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci looks like "-1.2345e+02": split sign, digits and exponent.
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  int exp = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  if (exp >= -5 + 1 && exp < 16) {
    if (exp >= 0) {
      if (static_cast<int>(digits.size()) <= exp + 1) {
        out += digits + std::string(exp + 1 - digits.size(), '0') + ".0";
      } else {
        out += digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
      }
    } else {
      out += "0." + std::string(-exp - 1, '0') + digits;
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
  return out;
}

namespace {

void repr_string(std::string& out, const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  out += quote;
  for (uint32_t cp : decode_utf8(s)) {
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) {
      out += fmt::format("\\x{:02x}", cp);
    } else if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202f) ||
               (cp >= 0x205f && cp <= 0x2064) || cp == 0x3000 || cp == 0xfeff ||
               (cp >= 0xd800 && cp <= 0xdfff)) {
      out += fmt::format("\\u{:04x}", cp);
    } else {
      append_utf8(out, cp);
    }
  }
  out += quote;
}

void repr_into(std::string& out, const Value& v, int depth);

void repr_list(std::string& out, const List& l, int depth) {
  out += l.is_tuple ? '(' : '[';
  for (size_t i = 0; i < l.items.size(); ++i) {
    if (i) out += ", ";
    repr_into(out, l.items[i], depth + 1);
  }
  if (l.is_tuple && l.items.size() == 1) out += ',';
  out += l.is_tuple ? ')' : ']';
}

void repr_dict(std::string& out, const Dict& d, int depth) {
  out += '{';
  for (size_t i = 0; i < d.items.size(); ++i) {
    if (i) out += ", ";
    repr_into(out, d.items[i].first, depth + 1);
    out += ": ";
    repr_into(out, d.items[i].second, depth + 1);
  }
  out += '}';
}

void str_into(std::string& out, const Value& v, int depth) {
  check_depth(depth);
  switch (v.kind()) {
    case Kind::kUndefined:
      return;
    case Kind::kNone:
      out += "None";
      return;
    case Kind::kBool:
      out += v.as_bool() ? "True" : "False";
      return;
    case Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Kind::kFloat:
      out += format_float(v.as_double());
      return;
    case Kind::kString:
      out += v.str();
      return;
    case Kind::kList:
      repr_list(out, *v.list(), depth);
      return;
    case Kind::kDict:
      if (v.is_namespace()) out += "<Namespace ";
      repr_dict(out, *v.dict(), depth);
      if (v.is_namespace()) out += '>';
      return;
    case Kind::kCallable:
      out += "<function " + v.callable()->name + ">";
      return;
  }
}

void repr_into(std::string& out, const Value& v, int depth) {
  check_depth(depth);
  if (v.is_string()) {
    repr_string(out, v.str());
  } else if (v.is_undefined()) {
    out += "Undefined";
  } else {
    str_into(out, v, depth);
  }
}

}  // namespace

std::string to_str(const Value& v) {
  if (v.is_string()) return v.str();
  std::string out;
  str_into(out, v, 0);
  return out;
}

std::string repr(const Value& v) {
  std::string out;
  repr_into(out, v, 0);
  return out;
}

bool equals(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.str() == b.str();
    case Kind::kList: {
      const List& x = *a.list();
      const List& y = *b.list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equals(x.items[i], y.items[i], depth + 1)) return false;
      return true;
    }
    case Kind::kDict: {
      if (a.is_namespace() || b.is_namespace()) return a.dict() == b.dict();
      const Dict& x = *a.dict();
      const Dict& y = *b.dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* w = y.find(k);
        if (!w || !equals(v, *w, depth + 1)) return false;
      }
      return true;
    }
    case Kind::kCallable:
      return a.callable() == b.callable();
    default:
      return false;
  }
}

bool less_than(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 order == code point order
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.list()->items;
    const auto& y = b.list()->items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i], depth + 1)) continue;
      return less_than(x[i], y[i], depth + 1);
    }
    return x.size() < y.size();
  }
  LOOM_THROW("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b));
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return v.is_tuple() ? "tuple" : "list";
    case Kind::kDict:
      return v.is_namespace() ? "Namespace" : "dict";
    case Kind::kCallable:
      return "function";
  }
  return "object";
}

namespace {

struct JsonWriter {
  const JsonOptions& opt;
  size_t max_bytes;
  int max_depth;
  std::string out;

  void check_size() {
    if (out.size() > max_bytes) LOOM_THROW("tojson output too large ({} bytes)", out.size());
  }

  void string(const std::string& s) {
    out += '"';
    for (uint32_t cp : decode_utf8(s)) {
      switch (cp) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (cp < 0x20) {
            out += fmt::format("\\u{:04x}", cp);
          } else if (cp >= 0x80 && opt.ensure_ascii) {
            if (cp >= 0x10000) {
              uint32_t v = cp - 0x10000;
              out += fmt::format("\\u{:04x}\\u{:04x}", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
            } else {
              out += fmt::format("\\u{:04x}", cp);
            }
          } else {
            append_utf8(out, cp);
          }
      }
    }
    out += '"';
  }

  void newline(int level) {
    if (!opt.has_indent) return;
    out += '\n';
    for (int i = 0; i < level; ++i) out += opt.indent;
    check_size();
  }

  std::string key_string(const Value& k) {
    switch (k.kind()) {
      case Kind::kString:
        return k.str();
      case Kind::kBool:
        return k.as_bool() ? "true" : "false";
      case Kind::kNone:
        return "null";
      case Kind::kInt:
        return std::to_string(k.as_int());
      case Kind::kFloat:
        return format_float(k.as_double());
      default:
        LOOM_THROW("keys must be str, int, float, bool or None, not {}", type_name(k));
    }
  }

  void value(const Value& v, int level) {
    if (level > max_depth) LOOM_THROW("tojson: value nested too deeply");
    check_size();
    switch (v.kind()) {
      case Kind::kNone:
        out += "null";
        return;
      case Kind::kBool:
        out += v.as_bool() ? "true" : "false";
        return;
      case Kind::kInt:
        out += std::to_string(v.as_int());
        return;
      case Kind::kFloat: {
        double d = v.as_double();
        if (std::isnan(d)) out += "NaN";
        else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
        else out += format_float(d);
        return;
      }
      case Kind::kString:
        string(v.str());
        return;
      case Kind::kList: {
        const auto& items = v.list()->items;
        if (items.empty()) {
          out += "[]";
          return;
        }
        out += '[';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += opt.item_separator;
          newline(level + 1);
          value(items[i], level + 1);
        }
        newline(level);
        out += ']';
        return;
      }
      case Kind::kDict: {
        if (v.is_namespace()) break;
        std::vector<std::pair<std::string, const Value*>> entries;
        for (const auto& [k, x] : v.dict()->items) entries.emplace_back(key_string(k), &x);
        if (opt.sort_keys)
          std::stable_sort(entries.begin(), entries.end(),
                           [](const auto& a, const auto& b) { return a.first < b.first; });
        if (entries.empty()) {
          out += "{}";
          return;
        }
        out += '{';
        for (size_t i = 0; i < entries.size(); ++i) {
          if (i) out += opt.item_separator;
          newline(level + 1);
          string(entries[i].first);
          out += opt.key_separator;
          value(*entries[i].second, level + 1);
        }
        newline(level);
        out += '}';
        return;
      }
      default:
        break;
    }
    LOOM_THROW("Object of type {} is not JSON serializable", type_name(v));
  }
};

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options, size_t max_bytes, int max_depth) {
  JsonWriter w{options, max_bytes, max_depth, {}};
  w.value(v, 0);
  w.check_size();
  return std::move(w.out);
}

}  // namespace loom::jinja
