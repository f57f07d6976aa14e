// Filters (`x | name(args)`) and tests (`x is name`), with jinja2 3.1's
// argument names and defaults. tojson is transformers' override: json.dumps
// with ensure_ascii=False, no HTML escaping.
#include "core/error.h"
#include "tokenizer/jinja/evaluator.h"
#include "tokenizer/jinja/pystr.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace loom::jinja {

namespace {

std::string soft_str(const Value& v) { return to_str(v); }

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return 0;
    case Kind::kString:
      return static_cast<int64_t>(utf8_length(v.str()));
    case Kind::kList:
      return static_cast<int64_t>(v.list()->items.size());
    case Kind::kDict:
      if (!v.is_namespace()) return static_cast<int64_t>(v.dict()->items.size());
      break;
    default:
      break;
  }
  LOOM_THROW("object of type '{}' has no len()", type_name(v));
}

bool arg_bool(const Value& v, bool def) { return v.is_undefined() ? def : truthy(v); }

int64_t arg_int(const Value& v, int64_t def, const char* what) {
  if (v.is_undefined()) return def;
  if (!v.is_int() && !v.is_bool()) LOOM_THROW("{} must be an integer, not {}", what, type_name(v));
  return v.as_int();
}

// `attribute` arguments may be dotted ("a.b") or integer indexes ("0").
Value attribute_of(Renderer& r, const Value& item, const Value& attribute) {
  if (attribute.is_int()) return get_item(r, item, attribute);
  Value cur = item;
  std::string path = soft_str(attribute);
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (cur.is_undefined()) throw_undefined(cur);
    if (!part.empty() && part.size() < 18 && part.find_first_not_of("0123456789") == std::string::npos)
      cur = get_item(r, cur, Value(static_cast<int64_t>(std::stoll(part))));
    else
      cur = get_item(r, cur, Value(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// Sort key: lower-cases strings unless case-sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py_lower(v.str()));
  return v;
}

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::optional<double> parse_float(const std::string& s) {
  std::string t = py_strip(s, std::nullopt, StripSide::kBoth);
  t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return d;
}

Value filter_int(const Value& v, const Value& def_arg, const Value& base_arg) {
  Value def = def_arg.is_undefined() ? Value(int64_t{0}) : def_arg;
  int64_t base = arg_int(base_arg, 10, "base");
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    double d = v.as_double();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return def;
    return Value(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    std::string t = py_strip(v.str(), std::nullopt, StripSide::kBoth);
    t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
    if (!t.empty()) {
      errno = 0;
      char* end = nullptr;
      long long x = std::strtoll(t.c_str(), &end, static_cast<int>(base));
      if (errno == 0 && end == t.c_str() + t.size()) return Value(static_cast<int64_t>(x));
    }
    if (base == 10) {
      if (auto d = parse_float(v.str()); d && std::isfinite(*d) && std::fabs(*d) < 9.2e18)
        return Value(static_cast<int64_t>(*d));
    }
  }
  return def;
}

// Python's round(x, n) for floats: exact binary value, ties to even.
double py_round(double x, int64_t ndigits) {
  if (!std::isfinite(x)) return x;
  if (ndigits == 0) return std::nearbyint(x);
  if (ndigits > 300 || ndigits < -300) return ndigits > 0 ? x : 0.0 * x;
  if (ndigits < 0) {
    double p = std::pow(10.0, static_cast<double>(-ndigits));
    return std::nearbyint(x / p) * p;
  }
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(ndigits), x);
  return std::strtod(buf, nullptr);
}

std::string do_indent(std::string s, const Value& width, bool first, bool blank) {
  std::string ind = width.is_string() ? width.str() : std::string(static_cast<size_t>(std::max<int64_t>(0, arg_int(width, 4, "width"))), ' ');
  s += "\n";
  std::vector<std::string> lines = py_splitlines(s, false);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + ind;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += ind;
      rv += lines[i];
    }
  }
  if (first) rv = ind + rv;
  return rv;
}

std::string do_truncate(const std::string& s, int64_t length, bool killwords, const std::string& end,
                        int64_t leeway) {
  std::vector<uint32_t> cps = decode_utf8(s);
  int64_t n = static_cast<int64_t>(cps.size());
  int64_t end_len = static_cast<int64_t>(utf8_length(end));
  if (length < end_len) LOOM_THROW("expected length >= {}, got {}", end_len, length);
  if (leeway < 0) LOOM_THROW("expected leeway >= 0, got {}", leeway);
  if (n <= length + leeway) return s;
  int64_t cut = std::max<int64_t>(0, length - end_len);
  std::string head = encode_utf8(std::vector<uint32_t>(cps.begin(), cps.begin() + cut));
  if (killwords) return head + end;
  size_t sp = head.rfind(' ');
  if (sp != std::string::npos) head.resize(sp);
  return head + end;
}

}  // namespace

std::string percent_format(Renderer& r, const std::string& fmt, const std::vector<Value>& args) {
  std::string out;
  size_t next_arg = 0;
  const Value* mapping = args.size() == 1 && args[0].is_mapping() ? &args[0] : nullptr;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) LOOM_THROW("incomplete format");
    Value arg;
    bool have_arg = false;
    if (fmt[i] == '(') {
      size_t e = fmt.find(')', i);
      if (e == std::string::npos || !mapping) LOOM_THROW("format requires a mapping");
      const Value* v = mapping->dict()->find(fmt.substr(i + 1, e - i - 1));
      if (!v) LOOM_THROW("format: missing key '{}'", fmt.substr(i + 1, e - i - 1));
      arg = *v;
      have_arg = true;
      i = e + 1;
    }
    std::string flags;
    while (i < fmt.size() && std::string("-+ 0#").find(fmt[i]) != std::string::npos) flags += fmt[i++];
    std::string width, prec;
    while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) width += fmt[i++];
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      prec = ".";
      while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) prec += fmt[i++];
    }
    if (i >= fmt.size()) LOOM_THROW("incomplete format");
    char conv = fmt[i];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (!have_arg) {
      if (mapping && args.size() == 1 && next_arg == 0 && conv != 's' && conv != 'r') {
        LOOM_THROW("format requires a mapping");
      }
      if (next_arg >= args.size()) LOOM_THROW("not enough arguments for format string");
      arg = args[next_arg++];
    }
    if (width.size() > 4 || prec.size() > 4) LOOM_THROW("format width too large");
    std::string spec = "%" + flags + width + prec;
    char buf[512];
    switch (conv) {
      case 's':
      case 'r': {
        std::string s = conv == 's' ? to_str(arg) : repr(arg);
        int w = width.empty() ? 0 : std::stoi(width);
        if (prec.size() > 1) s = encode_utf8([&] {
          auto cps = decode_utf8(s);
          cps.resize(std::min<size_t>(cps.size(), std::stoul(prec.substr(1))));
          return cps;
        }());
        int pad = w - static_cast<int>(utf8_length(s));
        if (pad > 0) s = flags.find('-') != std::string::npos ? s + std::string(pad, ' ') : std::string(pad, ' ') + s;
        out += s;
        break;
      }
      case 'd':
      case 'i':
      case 'x':
      case 'X':
      case 'o': {
        if (!arg.is_number()) LOOM_THROW("%{} format: a real number is required, not {}", conv, type_name(arg));
        long long v = arg.is_float() ? static_cast<long long>(arg.as_double()) : arg.as_int();
        std::snprintf(buf, sizeof(buf), (spec + "ll" + (conv == 'i' ? 'd' : conv)).c_str(), v);
        out += buf;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!arg.is_number()) LOOM_THROW("must be real number, not {}", type_name(arg));
        std::snprintf(buf, sizeof(buf), (spec + conv).c_str(), arg.as_double());
        out += buf;
        break;
      }
      default:
        LOOM_THROW("unsupported format character '{}'", conv);
    }
    r.charge_bytes(out.size());
  }
  if (!mapping && next_arg < args.size()) LOOM_THROW("not all arguments converted during string formatting");
  return out;
}

Value Renderer::apply_filter(const std::string& name, const Value& v, CallArgs& a) {
  charge(1);
  auto arg = [&](std::initializer_list<const char*> names) { return bind_args(a, names, name.c_str()); };
  if (name == "tojson") {
    auto p = arg({"ensure_ascii", "indent", "separators", "sort_keys"});
    JsonOptions o;
    o.ensure_ascii = arg_bool(p[0], false);
    o.sort_keys = arg_bool(p[3], false);
    if (!p[1].is_undefined() && !p[1].is_none()) {
      o.has_indent = true;
      if (p[1].is_string()) {
        o.indent = p[1].str();
      } else {
        int64_t n = arg_int(p[1], 0, "indent");
        if (n > 64) LOOM_THROW("tojson indent too large");
        o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, n)), ' ');
      }
      o.item_separator = ",";
    }
    if (!p[2].is_undefined() && !p[2].is_none()) {
      std::vector<Value> seps = iterate(*this, p[2]);
      if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string())
        LOOM_THROW("tojson separators must be a pair of strings");
      o.item_separator = seps[0].str();
      o.key_separator = seps[1].str();
    }
    std::string s = to_json(v, o, max_bytes(), limits_.max_depth);
    charge_bytes(s.size());
    return Value(std::move(s));
  }
  if (name == "default" || name == "d") {
    auto p = arg({"default_value", "boolean"});
    bool use_default = v.is_undefined() || (arg_bool(p[1], false) && !truthy(v));
    if (!use_default) return v;
    return p[0].is_undefined() ? Value("") : p[0];
  }
  if (name == "length" || name == "count") {
    arg({});
    return Value(length_of(v));
  }
  if (name == "string") {
    arg({});
    return Value(soft_str(v));
  }
  if (name == "safe") {
    arg({});
    return v;
  }
  if (name == "escape" || name == "e") {
    arg({});
    return Value(html_escape(soft_str(v)));
  }
  if (name == "trim") {
    auto p = arg({"chars"});
    std::optional<std::string> chars;
    if (p[0].is_string()) chars = p[0].str();
    return Value(py_strip(soft_str(v), chars, StripSide::kBoth));
  }
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
    arg({});
    std::string s = soft_str(v);
    if (name == "upper") return Value(py_upper(s));
    if (name == "lower") return Value(py_lower(s));
    if (name == "capitalize") return Value(py_capitalize(s));
    return Value(jinja_title(s));
  }
  if (name == "replace") {
    auto p = arg({"old", "new", "count"});
    int64_t count = p[2].is_undefined() || p[2].is_none() ? -1 : arg_int(p[2], -1, "count");
    return Value(py_replace(soft_str(v), soft_str(p[0]), soft_str(p[1]), count, max_bytes()));
  }
  if (name == "first" || name == "last") {
    arg({});
    std::vector<Value> items = iterate(*this, v);
    if (items.empty()) return Value::undefined(name == "first" ? "first item" : "last item");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    auto p = arg({"d", "attribute"});
    std::string sep = p[0].is_undefined() ? "" : soft_str(p[0]);
    std::string out;
    bool first = true;
    for (const Value& x : iterate(*this, v)) {
      if (!first) out += sep;
      first = false;
      out += soft_str(p[1].is_undefined() || p[1].is_none() ? x : attribute_of(*this, x, p[1]));
      charge_bytes(out.size());
    }
    return Value(std::move(out));
  }
  if (name == "list") {
    arg({});
    return make_list(iterate(*this, v));
  }
  if (name == "items") {
    arg({});
    if (v.is_undefined()) return make_list({});
    if (!v.is_mapping()) LOOM_THROW("can only get item pairs from a mapping");
    std::vector<Value> out;
    for (const auto& [k, x] : v.dict()->items) out.push_back(make_list({k, x}, true));
    charge(static_cast<int64_t>(out.size()));
    return make_list(std::move(out));
  }
  if (name == "dictsort") {
    auto p = arg({"case_sensitive", "by", "reverse"});
    if (!v.is_mapping()) LOOM_THROW("dictsort expects a mapping, got {}", type_name(v));
    bool cs = arg_bool(p[0], false);
    int pos = 0;
    if (!p[1].is_undefined()) {
      std::string by = soft_str(p[1]);
      if (by == "value") pos = 1;
      else if (by != "key") LOOM_THROW("You can only sort by either 'key' or 'value'");
    }
    std::vector<Value> out;
    for (const auto& [k, x] : v.dict()->items) out.push_back(make_list({k, x}, true));
    charge(static_cast<int64_t>(out.size()) * 8);
    std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
      return less_than(sort_key(x.list()->items[pos], cs), sort_key(y.list()->items[pos], cs));
    });
    if (arg_bool(p[2], false)) std::reverse(out.begin(), out.end());
    return make_list(std::move(out));
  }
  if (name == "sort") {
    auto p = arg({"reverse", "case_sensitive", "attribute"});
    std::vector<Value> items = iterate(*this, v);
    bool cs = arg_bool(p[1], false);
    bool rev = arg_bool(p[0], false);
    bool has_attr = !p[2].is_undefined() && !p[2].is_none();
    charge(static_cast<int64_t>(items.size()) * 8);
    std::vector<std::pair<Value, Value>> keyed;
    for (const Value& x : items)
      keyed.emplace_back(sort_key(has_attr ? attribute_of(*this, x, p[2]) : x, cs), x);
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
      return rev ? less_than(y.first, x.first) : less_than(x.first, y.first);
    });
    std::vector<Value> out;
    for (auto& kv : keyed) out.push_back(kv.second);
    return make_list(std::move(out));
  }
  if (name == "reverse") {
    arg({});
    if (v.is_string()) {
      std::vector<uint32_t> cps = decode_utf8(v.str());
      std::reverse(cps.begin(), cps.end());
      return Value(encode_utf8(cps));
    }
    std::vector<Value> items = iterate(*this, v);
    std::reverse(items.begin(), items.end());
    return make_list(std::move(items));
  }
  if (name == "unique") {
    auto p = arg({"case_sensitive", "attribute"});
    bool cs = arg_bool(p[0], false);
    bool has_attr = !p[1].is_undefined() && !p[1].is_none();
    std::vector<Value> out, seen;
    for (const Value& x : iterate(*this, v)) {
      Value key = sort_key(has_attr ? attribute_of(*this, x, p[1]) : x, cs);
      charge(static_cast<int64_t>(seen.size()));
      bool dup = false;
      for (const Value& s : seen)
        if (equals(s, key)) {
          dup = true;
          break;
        }
      if (dup) continue;
      seen.push_back(key);
      out.push_back(x);
    }
    return make_list(std::move(out));
  }
  if (name == "min" || name == "max") {
    auto p = arg({"case_sensitive", "attribute"});
    bool cs = arg_bool(p[0], false);
    bool has_attr = !p[1].is_undefined() && !p[1].is_none();
    std::vector<Value> items = iterate(*this, v);
    if (items.empty()) return Value::undefined("no items");
    size_t best = 0;
    Value best_key = sort_key(has_attr ? attribute_of(*this, items[0], p[1]) : items[0], cs);
    for (size_t i = 1; i < items.size(); ++i) {
      Value k = sort_key(has_attr ? attribute_of(*this, items[i], p[1]) : items[i], cs);
      if (name == "min" ? less_than(k, best_key) : less_than(best_key, k)) {
        best = i;
        best_key = k;
      }
    }
    return items[best];
  }
  if (name == "sum") {
    auto p = arg({"attribute", "start"});
    Value total = p[1].is_undefined() ? Value(int64_t{0}) : p[1];
    bool has_attr = !p[0].is_undefined() && !p[0].is_none();
    for (const Value& x : iterate(*this, v)) {
      Value y = has_attr ? attribute_of(*this, x, p[0]) : x;
      if (!total.is_number() || !y.is_number())
        LOOM_THROW("unsupported operand type(s) for +: '{}' and '{}'", type_name(total), type_name(y));
      if (total.is_float() || y.is_float()) {
        total = Value(total.as_double() + y.as_double());
      } else {
        int64_t s;
        if (__builtin_add_overflow(total.as_int(), y.as_int(), &s)) LOOM_THROW("integer overflow");
        total = Value(s);
      }
    }
    return total;
  }
  if (name == "map") {
    std::vector<Value> items = iterate(*this, v);
    std::vector<Value> out;
    const Value* attribute = nullptr;
    Value def;
    for (const auto& [k, x] : a.keyword) {
      if (k == "attribute") attribute = &x;
      else if (k == "default") def = x;
    }
    if (attribute) {
      for (const Value& x : items) {
        Value y = attribute_of(*this, x, *attribute);
        out.push_back(y.is_undefined() && !def.is_undefined() ? def : y);
      }
      return make_list(std::move(out));
    }
    if (a.positional.empty()) LOOM_THROW("map requires a filter name or attribute=");
    std::string filter = soft_str(a.positional[0]);
    CallArgs rest;
    rest.positional.assign(a.positional.begin() + 1, a.positional.end());
    rest.keyword = a.keyword;
    for (const Value& x : items) {
      CallArgs copy = rest;
      out.push_back(apply_filter(filter, x, copy));
    }
    return make_list(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    bool by_attr = name == "selectattr" || name == "rejectattr";
    bool keep_if = name == "select" || name == "selectattr";
    std::vector<Value> items = iterate(*this, v);
    size_t first_arg = by_attr ? 1 : 0;
    if (by_attr && a.positional.empty()) LOOM_THROW("{} requires an attribute name", name);
    std::optional<std::string> test;
    if (a.positional.size() > first_arg) test = soft_str(a.positional[first_arg]);
    CallArgs rest;
    if (a.positional.size() > first_arg + 1)
      rest.positional.assign(a.positional.begin() + first_arg + 1, a.positional.end());
    rest.keyword = a.keyword;
    std::vector<Value> out;
    for (const Value& x : items) {
      Value subject = by_attr ? attribute_of(*this, x, a.positional[0]) : x;
      bool ok;
      if (test) {
        CallArgs copy = rest;
        ok = apply_test(*test, subject, copy);
      } else {
        ok = truthy(subject);
      }
      if (ok == keep_if) out.push_back(x);
    }
    return make_list(std::move(out));
  }
  if (name == "attr") {
    auto p = arg({"name"});
    // jinja2's |attr reads Python attributes only (methods here), never items.
    std::string attr = soft_str(p[0]);
    if (v.is_undefined()) throw_undefined(v);
    Value found = get_attr(*this, v, attr);
    if (v.is_namespace() || found.is_callable()) return found;
    return Value::undefined(attr);
  }
  if (name == "int") {
    auto p = arg({"default", "base"});
    return filter_int(v, p[0], p[1]);
  }
  if (name == "float") {
    auto p = arg({"default"});
    Value def = p[0].is_undefined() ? Value(0.0) : p[0];
    if (v.is_number()) return Value(v.as_double());
    if (v.is_string()) {
      if (auto d = parse_float(v.str())) return Value(*d);
    }
    return def;
  }
  if (name == "abs") {
    arg({});
    if (v.is_float()) return Value(std::fabs(v.as_double()));
    if (v.is_int() || v.is_bool()) {
      if (v.as_int() == INT64_MIN) LOOM_THROW("integer overflow");
      return Value(static_cast<int64_t>(std::llabs(v.as_int())));
    }
    LOOM_THROW("bad operand type for abs(): '{}'", type_name(v));
  }
  if (name == "round") {
    auto p = arg({"precision", "method"});
    int64_t precision = arg_int(p[0], 0, "precision");
    std::string method = p[1].is_undefined() ? "common" : soft_str(p[1]);
    if (!v.is_number()) LOOM_THROW("round expects a number, not {}", type_name(v));
    if (method == "common") {
      if (!v.is_float() && precision >= 0) return Value(v.as_int());
      return Value(py_round(v.as_double(), precision));
    }
    if (method != "ceil" && method != "floor") LOOM_THROW("method must be common, ceil or floor");
    double p10 = std::pow(10.0, static_cast<double>(precision));
    double x = v.as_double() * p10;
    return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / p10);
  }
  if (name == "batch") {
    auto p = arg({"linecount", "fill_with"});
    int64_t n = arg_int(p[0], 1, "linecount");
    if (n <= 0) LOOM_THROW("batch size must be positive");
    std::vector<Value> out, cur;
    for (const Value& x : iterate(*this, v)) {
      cur.push_back(x);
      if (static_cast<int64_t>(cur.size()) == n) {
        out.push_back(make_list(std::move(cur)));
        cur.clear();
      }
    }
    if (!cur.empty()) {
      if (!p[1].is_undefined() && !p[1].is_none())
        while (static_cast<int64_t>(cur.size()) < n) cur.push_back(p[1]);
      out.push_back(make_list(std::move(cur)));
    }
    return make_list(std::move(out));
  }
  if (name == "indent") {
    auto p = arg({"width", "first", "blank"});
    std::string s = soft_str(v);
    size_t lines = static_cast<size_t>(std::count(s.begin(), s.end(), '\n')) + 1;
    size_t w = p[0].is_string() ? p[0].str().size() : static_cast<size_t>(std::max<int64_t>(0, arg_int(p[0], 4, "width")));
    if (w > max_bytes() || (w && lines > max_bytes() / w)) LOOM_THROW("indent result too large");
    charge_bytes(s.size() + lines * w);
    return Value(do_indent(s, p[0], arg_bool(p[1], false), arg_bool(p[2], false)));
  }
  if (name == "center") {
    auto p = arg({"width"});
    int64_t w = arg_int(p[0], 80, "width");
    std::string s = soft_str(v);
    int64_t len = static_cast<int64_t>(utf8_length(s));
    if (w <= len) return Value(s);
    if (static_cast<size_t>(w) > max_bytes()) LOOM_THROW("center width too large");
    int64_t total = w - len;
    int64_t left = total / 2 + (total & w & 1);
    return Value(std::string(static_cast<size_t>(left), ' ') + s +
                 std::string(static_cast<size_t>(total - left), ' '));
  }
  if (name == "truncate") {
    auto p = arg({"length", "killwords", "end", "leeway"});
    return Value(do_truncate(soft_str(v), arg_int(p[0], 255, "length"), arg_bool(p[1], false),
                             p[2].is_undefined() ? "..." : soft_str(p[2]), arg_int(p[3], 5, "leeway")));
  }
  if (name == "wordcount") {
    arg({});
    int64_t n = 0;
    bool in_word = false;
    for (uint32_t cp : decode_utf8(soft_str(v))) {
      bool w = cp == '_' || (cp >= '0' && cp <= '9') || (cp < 0x80 && ((cp | 32) >= 'a' && (cp | 32) <= 'z')) ||
               (cp >= 0x80 && !py_isspace(cp));
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value(n);
  }
  if (name == "format") {
    std::vector<Value> args = a.positional;
    if (!a.keyword.empty()) {
      auto d = std::make_shared<Dict>();
      for (auto& [k, x] : a.keyword) d->set(Value(k), x);
      args = {Value(d)};
    }
    return Value(percent_format(*this, soft_str(v), args));
  }
  LOOM_THROW("no filter named '{}'", name);
}

bool Renderer::apply_test(const std::string& name, const Value& v, CallArgs& a) {
  charge(1);
  auto arg = [&](std::initializer_list<const char*> names) { return bind_args(a, names, name.c_str()); };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_mapping();
  if (name == "iterable") return v.is_list() || v.is_string() || v.is_mapping() || v.is_undefined();
  if (name == "sequence") return v.is_list() || v.is_string() || v.is_mapping() || v.is_undefined();
  if (name == "callable") return v.is_callable();
  if (name == "escaped") return false;
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    bool any_cased = false;
    for (uint32_t cp : decode_utf8(v.str())) {
      if (!py_iscased(cp)) continue;
      any_cased = true;
      if (name == "lower" ? py_tolower(cp) != cp : py_toupper(cp) != cp) return false;
    }
    return any_cased;
  }
  if (name == "even" || name == "odd") {
    if (!v.is_int() && !v.is_bool()) {
      if (v.is_float()) return std::fmod(std::fabs(v.as_double()), 2.0) == (name == "even" ? 0.0 : 1.0);
      LOOM_THROW("'{}' test expects a number, got {}", name, type_name(v));
    }
    int64_t r = v.as_int() % 2;
    return name == "even" ? r == 0 : r != 0;
  }
  if (name == "divisibleby") {
    auto p = arg({"num"});
    if (!v.is_number() || !p[0].is_number()) LOOM_THROW("divisibleby expects numbers");
    if (p[0].as_double() == 0) LOOM_THROW("integer division or modulo by zero");
    if (v.is_float() || p[0].is_float()) return std::fmod(v.as_double(), p[0].as_double()) == 0;
    return v.as_int() % p[0].as_int() == 0;
  }
  if (name == "sameas") {
    auto p = arg({"other"});
    const Value& o = p[0];
    if (v.kind() != o.kind()) return false;
    switch (v.kind()) {
      case Kind::kList:
        return v.list() == o.list();
      case Kind::kDict:
        return v.dict() == o.dict();
      case Kind::kCallable:
        return v.callable() == o.callable();
      case Kind::kString:
        return v.str_ptr() == o.str_ptr() || v.str() == o.str();
      default:
        return equals(v, o);
    }
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, arg({"other"})[0]);
  if (name == "ne" || name == "!=") return !equals(v, arg({"other"})[0]);
  if (name == "lt" || name == "lessthan" || name == "<") return less_than(v, arg({"other"})[0]);
  if (name == "gt" || name == "greaterthan" || name == ">") return less_than(arg({"other"})[0], v);
  if (name == "le" || name == "<=") return !less_than(arg({"other"})[0], v);
  if (name == "ge" || name == ">=") return !less_than(v, arg({"other"})[0]);
  if (name == "in") {
    auto p = arg({"seq"});
    const Value& seq = p[0];
    if (seq.is_string()) return v.is_string() && seq.str().find(v.str()) != std::string::npos;
    if (seq.is_mapping()) return seq.dict()->find(v) != nullptr;
    for (const Value& x : iterate(*this, seq))
      if (equals(x, v)) return true;
    return false;
  }
  LOOM_THROW("no test named '{}'", name);
}

}  // namespace loom::jinja
