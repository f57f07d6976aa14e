// Attribute and item access, iteration, str/dict/list methods and the global
// functions. The sandbox lives here: only data the context gave, plus these
// methods, can be reached; names starting with '_' are refused, and methods
// that would mutate a list or dict fail when called, as in jinja2's
// ImmutableSandboxedEnvironment.
#include "core/error.h"
#include "tokenizer/jinja/evaluator.h"
#include "tokenizer/jinja/pystr.h"

#include <ctime>
#include <optional>

namespace loom::jinja {

namespace {

std::optional<std::string> opt_str(const Value& v, const char* what) {
  if (v.is_undefined() || v.is_none()) return std::nullopt;
  if (!v.is_string()) LOOM_THROW("{} must be str or None, not {}", what, type_name(v));
  return v.str();
}

const std::string& need_str(const Value& v, const char* what) {
  if (!v.is_string()) LOOM_THROW("{} must be str, not {}", what, type_name(v));
  return v.str();
}

int64_t opt_int(const Value& v, int64_t def) {
  if (v.is_undefined() || v.is_none()) return def;
  if (!v.is_int() && !v.is_bool()) LOOM_THROW("an integer is required, not {}", type_name(v));
  return v.as_int();
}

Value string_list(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& p : parts) items.emplace_back(std::move(p));
  return make_list(std::move(items));
}

// `{}`/`{0}`/`{name}` replacement fields with optional !r/!s; no format specs.
std::string str_format(Renderer& r, const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      else LOOM_THROW("single '}}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t e = fmt.find('}', i);
    if (e == std::string::npos) LOOM_THROW("single '{{' encountered in format string");
    std::string field = fmt.substr(i + 1, e - i - 1);
    i = e;
    char conv = 's';
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 1 < field.size()) conv = field[bang + 1];
      field.resize(bang);
    }
    if (field.find(':') != std::string::npos) LOOM_THROW("format specs are not supported");
    Value v;
    if (field.empty()) {
      if (auto_index >= args.positional.size()) LOOM_THROW("format: index out of range");
      v = args.positional[auto_index++];
    } else if (field.size() < 9 && field.find_first_not_of("0123456789") == std::string::npos) {
      size_t idx = std::stoul(field);
      if (idx >= args.positional.size()) LOOM_THROW("format: index out of range");
      v = args.positional[idx];
    } else {
      bool found = false;
      for (const auto& [k, x] : args.keyword)
        if (k == field) {
          v = x;
          found = true;
        }
      if (!found) LOOM_THROW("format: missing key '{}'", field);
    }
    out += conv == 'r' ? repr(v) : to_str(v);
    r.charge_bytes(out.size());
  }
  return out;
}

bool starts_or_ends(const std::string& s, const Value& arg, bool ends) {
  auto test = [&](const std::string& p) {
    if (p.size() > s.size()) return false;
    return ends ? s.compare(s.size() - p.size(), p.size(), p) == 0 : s.compare(0, p.size(), p) == 0;
  };
  if (arg.is_tuple()) {
    for (const Value& v : arg.list()->items)
      if (test(need_str(v, "startswith/endswith argument"))) return true;
    return false;
  }
  return test(need_str(arg, "startswith/endswith argument"));
}

Value string_method(Renderer& r, const std::string& s, const std::string& name, CallArgs& a) {
  auto arg = [&](std::initializer_list<const char*> names) {
    return bind_args(a, names, name.c_str());
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    auto v = arg({"chars"});
    StripSide side = name == "strip" ? StripSide::kBoth : name == "lstrip" ? StripSide::kLeft : StripSide::kRight;
    return Value(py_strip(s, opt_str(v[0], "chars"), side));
  }
  if (name == "split" || name == "rsplit") {
    auto v = arg({"sep", "maxsplit"});
    auto sep = opt_str(v[0], "sep");
    int64_t maxsplit = opt_int(v[1], -1);
    r.charge_bytes(s.size());
    return string_list(name == "split" ? py_split(s, sep, maxsplit) : py_rsplit(s, sep, maxsplit));
  }
  if (name == "splitlines") {
    auto v = arg({"keepends"});
    return string_list(py_splitlines(s, truthy(v[0])));
  }
  if (name == "startswith" || name == "endswith") {
    auto v = arg({"prefix"});
    return Value(starts_or_ends(s, v[0], name == "endswith"));
  }
  if (name == "upper") return Value(py_upper(s));
  if (name == "lower") return Value(py_lower(s));
  if (name == "title") return Value(py_title(s));
  if (name == "capitalize") return Value(py_capitalize(s));
  if (name == "replace") {
    auto v = arg({"old", "new", "count"});
    return Value(py_replace(s, need_str(v[0], "old"), need_str(v[1], "new"), opt_int(v[2], -1),
                            r.max_bytes()));
  }
  if (name == "format") return Value(str_format(r, s, a));
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    auto v = arg({"sub"});
    int64_t i = py_find(s, need_str(v[0], "sub"), name[0] == 'r');
    if (i < 0 && (name == "index" || name == "rindex")) LOOM_THROW("substring not found");
    return Value(i);
  }
  if (name == "count") {
    auto v = arg({"sub"});
    return Value(py_count(s, need_str(v[0], "sub")));
  }
  if (name == "join") {
    auto v = arg({"iterable"});
    std::string out;
    bool first = true;
    for (const Value& x : iterate(r, v[0])) {
      if (!first) out += s;
      first = false;
      out += need_str(x, "sequence item");
      r.charge_bytes(out.size());
    }
    return Value(std::move(out));
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
      name == "isupper" || name == "islower") {
    arg({});
    std::vector<uint32_t> cps = decode_utf8(s);
    if (cps.empty()) return Value(false);
    if (name == "isupper" || name == "islower") {
      bool any_cased = false;
      for (uint32_t cp : cps) {
        if (!py_iscased(cp)) continue;
        any_cased = true;
        if (name == "isupper" ? py_toupper(cp) != cp : py_tolower(cp) != cp) return Value(false);
      }
      return Value(any_cased);
    }
    for (uint32_t cp : cps) {
      bool digit = cp >= '0' && cp <= '9';
      bool alpha = (cp < 0x80 && ((cp | 32) >= 'a' && (cp | 32) <= 'z')) || (cp >= 0x80 && py_iscased(cp));
      bool ok = name == "isdigit" ? digit
                : name == "isalpha" ? alpha
                : name == "isalnum" ? digit || alpha
                                    : py_isspace(cp);
      if (!ok) return Value(false);
    }
    return Value(true);
  }
  LOOM_THROW("'str' object has no method '{}'", name);
}

bool is_string_method(const std::string& n) {
  static const char* kNames[] = {"strip",  "lstrip",  "rstrip",     "split",    "rsplit",
                                 "splitlines", "startswith", "endswith", "upper", "lower",
                                 "title",  "capitalize", "replace", "format", "find",
                                 "rfind",  "index",   "rindex",     "count",    "join",
                                 "isdigit", "isalpha", "isalnum",   "isspace",  "isupper",
                                 "islower"};
  for (const char* k : kNames)
    if (n == k) return true;
  return false;
}

Value unsafe_method(const std::string& type, const std::string& name) {
  return make_callable(name, [type, name](Renderer&, CallArgs&) -> Value {
    LOOM_THROW("access to attribute '{}' of '{}' object is unsafe (templates cannot modify data)",
               name, type);
  });
}

Value dict_method(const Value& obj, const std::string& name) {
  if (name == "get") {
    return make_callable("get", [obj](Renderer&, CallArgs& a) {
      auto v = bind_args(a, {"key", "default"}, "get");
      const Value* found = obj.dict()->find(v[0]);
      if (found) return *found;
      return v[1].is_undefined() ? Value::none() : v[1];
    });
  }
  if (name == "items" || name == "keys" || name == "values") {
    return make_callable(name, [obj, name](Renderer& r, CallArgs& a) {
      bind_args(a, {}, name.c_str());
      const auto& items = obj.dict()->items;
      r.charge(static_cast<int64_t>(items.size()));
      std::vector<Value> out;
      out.reserve(items.size());
      for (const auto& [k, v] : items) {
        if (name == "items") out.push_back(make_list({k, v}, true));
        else out.push_back(name == "keys" ? k : v);
      }
      return make_list(std::move(out));
    });
  }
  if (name == "update" || name == "pop" || name == "popitem" || name == "setdefault" ||
      name == "clear")
    return unsafe_method("dict", name);
  return Value::undefined(name);
}

Value list_method(const Value& obj, const std::string& name) {
  if (name == "index" || name == "count") {
    return make_callable(name, [obj, name](Renderer& r, CallArgs& a) {
      auto v = bind_args(a, {"value"}, name.c_str());
      const auto& items = obj.list()->items;
      r.charge(static_cast<int64_t>(items.size()));
      int64_t n = 0;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!equals(items[i], v[0])) continue;
        if (name == "index") return Value(static_cast<int64_t>(i));
        ++n;
      }
      if (name == "index") LOOM_THROW("{} is not in list", repr(v[0]));
      return Value(n);
    });
  }
  if (!obj.is_tuple() && (name == "append" || name == "extend" || name == "insert" ||
                          name == "pop" || name == "remove" || name == "reverse" ||
                          name == "sort" || name == "clear"))
    return unsafe_method("list", name);
  return Value::undefined(name);
}

int64_t to_index(const Value& v) {
  if (!v.is_int() && !v.is_bool()) LOOM_THROW("indices must be integers, not {}", type_name(v));
  return v.as_int();
}

// Python's slice.indices(): clamps start/stop for a sequence of length n.
void slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step,
                   int64_t& b, int64_t& e, int64_t& s) {
  s = step.is_none() || step.is_undefined() ? 1 : to_index(step);
  if (s == 0) LOOM_THROW("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t def) {
    if (v.is_none() || v.is_undefined()) return def;
    int64_t i = to_index(v);
    if (i < 0) {
      i += n;
      if (i < 0) i = s < 0 ? -1 : 0;
    } else if (i >= n) {
      i = s < 0 ? n - 1 : n;
    }
    return i;
  };
  b = clamp(start, s < 0 ? n - 1 : 0);
  e = clamp(stop, s < 0 ? -1 : n);
}

}  // namespace

Value get_attr(Renderer& r, const Value& obj, const std::string& name) {
  (void)r;
  if (!name.empty() && name[0] == '_')
    LOOM_THROW("access to attribute '{}' is not allowed in templates", name);
  switch (obj.kind()) {
    case Kind::kUndefined:
      throw_undefined(obj);
    case Kind::kDict: {
      if (obj.is_namespace()) {
        const Value* v = obj.dict()->find(name);
        return v ? *v : Value::undefined(name);
      }
      Value m = dict_method(obj, name);
      if (!m.is_undefined()) return m;
      const Value* v = obj.dict()->find(name);
      return v ? *v : Value::undefined(name);
    }
    case Kind::kString:
      if (is_string_method(name)) {
        StringPtr s = obj.str_ptr();
        return make_callable(name, [s, name](Renderer& rr, CallArgs& a) {
          return string_method(rr, *s, name, a);
        });
      }
      return Value::undefined(name);
    case Kind::kList:
      return list_method(obj, name);
    default:
      return Value::undefined(name);
  }
}

Value get_item(Renderer& r, const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Kind::kUndefined:
      throw_undefined(obj);
    case Kind::kDict: {
      const Value* v = obj.dict()->find(key);
      if (v) return *v;
      if (key.is_string() && !obj.is_namespace()) return get_attr(r, obj, key.str());
      return Value::undefined(key.is_string() ? key.str() : repr(key));
    }
    case Kind::kList: {
      if (!key.is_int() && !key.is_bool()) {
        if (key.is_string()) return get_attr(r, obj, key.str());
        return Value::undefined();
      }
      const auto& items = obj.list()->items;
      int64_t i = key.as_int();
      int64_t n = static_cast<int64_t>(items.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined(fmt::format("{} object has no element {}", type_name(obj), key.as_int()));
      return items[static_cast<size_t>(i)];
    }
    case Kind::kString: {
      if (!key.is_int() && !key.is_bool()) {
        if (key.is_string()) return get_attr(r, obj, key.str());
        return Value::undefined();
      }
      std::vector<uint32_t> cps = decode_utf8(obj.str());
      int64_t i = key.as_int();
      int64_t n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined();
      std::string out;
      append_utf8(out, cps[static_cast<size_t>(i)]);
      return Value(std::move(out));
    }
    default:
      if (key.is_string()) return get_attr(r, obj, key.str());
      return Value::undefined();
  }
}

Value slice_value(Renderer& r, const Value& obj, const Value& start, const Value& stop,
                  const Value& step) {
  if (obj.is_undefined()) throw_undefined(obj);
  int64_t b, e, s;
  if (obj.is_list()) {
    const auto& items = obj.list()->items;
    slice_indices(static_cast<int64_t>(items.size()), start, stop, step, b, e, s);
    std::vector<Value> out;
    for (int64_t i = b; s > 0 ? i < e : i > e; i += s) out.push_back(items[static_cast<size_t>(i)]);
    r.charge(static_cast<int64_t>(out.size()));
    return make_list(std::move(out), obj.is_tuple());
  }
  if (obj.is_string()) {
    std::vector<uint32_t> cps = decode_utf8(obj.str());
    slice_indices(static_cast<int64_t>(cps.size()), start, stop, step, b, e, s);
    std::string out;
    for (int64_t i = b; s > 0 ? i < e : i > e; i += s) append_utf8(out, cps[static_cast<size_t>(i)]);
    r.charge_bytes(out.size());
    return Value(std::move(out));
  }
  return Value::undefined();
}

std::vector<Value> iterate(Renderer& r, const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return {};
    case Kind::kList:
      r.charge(static_cast<int64_t>(v.list()->items.size()));
      return v.list()->items;
    case Kind::kDict: {
      if (v.is_namespace()) break;
      std::vector<Value> keys;
      keys.reserve(v.dict()->items.size());
      for (const auto& [k, x] : v.dict()->items) keys.push_back(k);
      r.charge(static_cast<int64_t>(keys.size()));
      return keys;
    }
    case Kind::kString: {
      std::vector<Value> out;
      for (uint32_t cp : decode_utf8(v.str())) {
        std::string c;
        append_utf8(c, cp);
        out.emplace_back(std::move(c));
      }
      r.charge(static_cast<int64_t>(out.size()));
      return out;
    }
    default:
      break;
  }
  LOOM_THROW("'{}' object is not iterable", type_name(v));
}

namespace {

Value builtin_range(Renderer& r, CallArgs& a) {
  if (!a.keyword.empty()) LOOM_THROW("range() takes no keyword arguments");
  const auto& p = a.positional;
  if (p.empty() || p.size() > 3) LOOM_THROW("range expected 1 to 3 arguments, got {}", p.size());
  int64_t start = 0, stop, step = 1;
  if (p.size() == 1) {
    stop = to_index(p[0]);
  } else {
    start = to_index(p[0]);
    stop = to_index(p[1]);
    if (p.size() == 3) step = to_index(p[2]);
  }
  if (step == 0) LOOM_THROW("range() arg 3 must not be zero");
  // Count without overflow, then refuse before materialising.
  __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  __int128 abs_step = step > 0 ? step : -static_cast<__int128>(step);
  __int128 count = span <= 0 ? 0 : (span + abs_step - 1) / abs_step;
  if (count > static_cast<__int128>(r.max_items()))
    LOOM_THROW("range() of {} items is more than a template may build", static_cast<long long>(
                   count > INT64_MAX ? INT64_MAX : static_cast<int64_t>(count)));
  r.charge(static_cast<int64_t>(count));
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0, v = start; i < static_cast<int64_t>(count); ++i, v += step) out.emplace_back(v);
  return make_list(std::move(out));
}

// dict(mapping_or_pairs, **kwargs) and namespace(...) take the same arguments.
DictPtr dict_from_args(Renderer& r, CallArgs& a, const char* fn) {
  auto d = std::make_shared<Dict>();
  if (a.positional.size() > 1) LOOM_THROW("{} expected at most 1 argument, got {}", fn, a.positional.size());
  if (a.positional.size() == 1) {
    const Value& src = a.positional[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.dict()->items) d->set(k, v);
    } else {
      for (const Value& pair : iterate(r, src)) {
        std::vector<Value> kv = iterate(r, pair);
        if (kv.size() != 2) LOOM_THROW("{} update sequence element has length {}; 2 is required", fn, kv.size());
        d->set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [k, v] : a.keyword) d->set(Value(k), v);
  return d;
}

Value builtin_strftime_now(Renderer& r, CallArgs& a) {
  auto v = bind_args(a, {"format"}, "strftime_now");
  const std::string& fmt = need_str(v[0], "format");
  std::time_t t;
  std::tm tm{};
  if (r.fixed_now()) {
    t = static_cast<std::time_t>(*r.fixed_now());
    gmtime_r(&t, &tm);
  } else {
    t = std::time(nullptr);
    localtime_r(&t, &tm);
  }
  if (fmt.size() > 1024) LOOM_THROW("strftime format too long");
  std::string buf(256 + fmt.size() * 16, '\0');
  size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
  if (n == 0 && !fmt.empty()) return Value(std::string());
  buf.resize(n);
  return Value(std::move(buf));
}

}  // namespace

void add_builtins(Scope& globals) {
  globals.vars["range"] = make_callable("range", builtin_range);
  globals.vars["dict"] = make_callable("dict", [](Renderer& r, CallArgs& a) {
    return Value(dict_from_args(r, a, "dict"));
  });
  globals.vars["namespace"] = make_callable("namespace", [](Renderer& r, CallArgs& a) {
    DictPtr d = dict_from_args(r, a, "namespace");
    for (const auto& [k, v] : d->items)
      if (k.is_string() && !k.str().empty() && k.str()[0] == '_')
        LOOM_THROW("namespace attribute '{}' may not start with '_'", k.str());
    d->is_namespace = true;
    r.track_namespace(d);
    return Value(d);
  });
  globals.vars["raise_exception"] = make_callable("raise_exception", [](Renderer&, CallArgs& a) -> Value {
    auto v = bind_args(a, {"message"}, "raise_exception");
    throw_raised(to_str(v[0]));
  });
  globals.vars["strftime_now"] = make_callable("strftime_now", builtin_strftime_now);
}

}  // namespace loom::jinja
