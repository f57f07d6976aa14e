// The shared tool-call parser: framing (markers, lists, separators, held-back
// marker prefixes) in one state machine, and the two call-body syntaxes (a
// JSON object; a Python-style call with literal arguments) as scanners over
// the buffered text of the call being read.
#include "server/tool_call_parser.h"

#include <fmt/format.h>

#include <cctype>
#include <random>

#include "tokenizer/jinja/pystr.h"

namespace loom::server {

using json = nlohmann::ordered_json;

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

size_t skip_space(std::string_view s, size_t i) {
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

// The length of the longest suffix of `s` that is a proper prefix of `marker`.
size_t marker_prefix_at_end(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

// A scan of a JSON object's text that may still be arriving.
struct ObjectScan {
  bool complete = false;
  size_t end = 0;                   // one past the closing brace
  std::optional<std::string> name;  // the "name" value, once complete
  size_t args_begin = std::string::npos;
  size_t args_end = std::string::npos;  // set once the arguments value is complete
  size_t scanned = 0;                   // bytes looked at
  bool args_string = false;             // the arguments are a JSON string (of JSON)
  bool malformed = false;
};

ObjectScan scan_object(std::string_view s, const std::vector<std::string>& argument_keys) {
  ObjectScan r;
  int depth = 0;
  bool in_string = false, escape = false;
  size_t key_begin = 0, value_begin = std::string::npos;
  std::string key;
  enum { Key, Colon, Value } expect = Key;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    r.scanned = i + 1;
    if (in_string) {
      if (escape)
        escape = false;
      else if (c == '\\')
        escape = true;
      else if (c == '"') {
        in_string = false;
        if (depth == 1 && expect == Key) {
          json k = json::parse(s.substr(key_begin, i + 1 - key_begin), nullptr, false);
          key = k.is_string() ? k.get<std::string>() : "";
          expect = Colon;
        }
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      if (depth == 1 && expect == Key) key_begin = i;
      continue;
    }
    if (c == '{' || c == '[') {
      ++depth;
      continue;
    }
    if (depth == 1 && c == ':' && expect == Colon) {
      expect = Value;
      value_begin = skip_space(s, i + 1);
      if (std::find(argument_keys.begin(), argument_keys.end(), key) != argument_keys.end()) {
        r.args_begin = value_begin;
        r.args_string = value_begin < s.size() && s[value_begin] == '"';
      }
      continue;
    }
    if (depth == 1 && (c == '}' || c == ']' || c == ',')) {
      if (expect == Value && value_begin != std::string::npos) {
        size_t value_end = i;
        while (value_end > value_begin && is_space(s[value_end - 1])) --value_end;
        const std::string_view value = s.substr(value_begin, value_end - value_begin);
        if (key == "name") {
          json v = json::parse(value, nullptr, false);
          if (v.is_string()) r.name = v.get<std::string>();
        }
        if (value_begin == r.args_begin) r.args_end = value_end;
      }
      expect = Key;
      value_begin = std::string::npos;
      if (c == ',') continue;
    }
    if (c == '}' || c == ']') {
      if (--depth == 0) {
        r.complete = true;
        r.end = i + 1;
        return r;
      }
      if (depth < 0) {
        r.malformed = true;
        return r;
      }
    }
  }
  return r;
}

// Python literals (str, int, float, True/False/None, list, tuple, dict) -> JSON.
class PyLiteral {
 public:
  explicit PyLiteral(std::string_view s) : s_(s) {}
  // The value at pos; false when incomplete or malformed (malformed_ set).
  bool parse(json* out) {
    pos_ = skip_space(s_, pos_);
    if (pos_ >= s_.size()) return false;
    const char c = s_[pos_];
    if (c == '\'' || c == '"') return parse_string(out);
    if (c == '[' || c == '(') return parse_list(out, c == '[' ? ']' : ')');
    if (c == '{') return parse_dict(out);
    size_t e = pos_;
    while (e < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '.' ||
                             s_[e] == '-' || s_[e] == '+' || s_[e] == '_'))
      ++e;
    if (e == s_.size()) return false;  // the token may continue
    const std::string_view word = s_.substr(pos_, e - pos_);
    pos_ = e;
    // Python's literals, and JSON's (a grammar-forced call writes values as JSON).
    if (word == "True" || word == "true")
      *out = true;
    else if (word == "False" || word == "false")
      *out = false;
    else if (word == "None" || word == "null")
      *out = nullptr;
    else {
      json v = json::parse(word, nullptr, false);
      if (!v.is_number()) return fail();
      *out = v;
    }
    return true;
  }
  size_t pos() const { return pos_; }
  void set_pos(size_t p) { pos_ = p; }
  bool malformed() const { return malformed_; }

 private:
  bool fail() {
    malformed_ = true;
    return false;
  }
  bool parse_string(json* out) {
    const char q = s_[pos_];
    std::string v;
    for (size_t i = pos_ + 1; i < s_.size(); ++i) {
      char c = s_[i];
      if (c == q) {
        pos_ = i + 1;
        *out = v;
        return true;
      }
      if (c == '\\') {
        if (++i >= s_.size()) return false;
        switch (s_[i]) {
          case 'n':
            v += '\n';
            break;
          case 't':
            v += '\t';
            break;
          case 'r':
            v += '\r';
            break;
          case 'b':
            v += '\b';
            break;
          case 'f':
            v += '\f';
            break;
          case 'x':  // Python \xHH, \uHHHH, \UHHHHHHHH; JSON \uHHHH (surrogate pairs joined)
          case 'u':
          case 'U': {
            const size_t n = s_[i] == 'x' ? 2 : s_[i] == 'u' ? 4 : 8;
            uint32_t cp = 0;
            if (!hex_at(i + 1, n, &cp)) return i + n < s_.size() ? fail() : false;
            i += n;
            uint32_t low = 0;
            if (cp >= 0xD800 && cp < 0xDC00 && i + 2 < s_.size() && s_[i + 1] == '\\' &&
                s_[i + 2] == 'u' && hex_at(i + 3, 4, &low) && low >= 0xDC00 && low < 0xE000) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
              i += 6;
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) cp = 0xFFFD;
            jinja::append_utf8(v, cp);
            break;
          }
          default:
            v += s_[i];
        }
        continue;
      }
      v += c;
    }
    return false;
  }
  // n hex digits at s_[at, at + n) -> *cp; false when short or not hex.
  bool hex_at(size_t at, size_t n, uint32_t* cp) const {
    if (at + n > s_.size()) return false;
    uint32_t v = 0;
    for (size_t k = at; k < at + n; ++k) {
      const char h = s_[k];
      const int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
      if (d < 0) return false;
      v = v * 16 + uint32_t(d);
    }
    *cp = v;
    return true;
  }
  bool parse_list(json* out, char close) {
    ++pos_;
    json arr = json::array();
    for (;;) {
      pos_ = skip_space(s_, pos_);
      if (pos_ >= s_.size()) return false;
      if (s_[pos_] == close) {
        ++pos_;
        *out = std::move(arr);
        return true;
      }
      json v;
      if (!parse(&v)) return false;
      arr.push_back(std::move(v));
      pos_ = skip_space(s_, pos_);
      if (pos_ >= s_.size()) return false;
      if (s_[pos_] == ',')
        ++pos_;
      else if (s_[pos_] != close)
        return fail();
    }
  }
  bool parse_dict(json* out) {
    ++pos_;
    json obj = json::object();
    for (;;) {
      pos_ = skip_space(s_, pos_);
      if (pos_ >= s_.size()) return false;
      if (s_[pos_] == '}') {
        ++pos_;
        *out = std::move(obj);
        return true;
      }
      json k, v;
      if (!parse(&k)) return false;
      pos_ = skip_space(s_, pos_);
      if (pos_ >= s_.size()) return false;
      if (s_[pos_] != ':') return fail();
      ++pos_;
      if (!parse(&v)) return false;
      obj[k.is_string() ? k.get<std::string>() : k.dump()] = std::move(v);
      pos_ = skip_space(s_, pos_);
      if (pos_ >= s_.size()) return false;
      if (s_[pos_] == ',')
        ++pos_;
      else if (s_[pos_] != '}')
        return fail();
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
  bool malformed_ = false;
};

bool ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
}

}  // namespace

std::string make_tool_call_id() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kChars[rng() % (sizeof(kChars) - 1)];
  return id;
}

std::optional<ToolCallFormat> tool_call_format(std::string_view name) {
  ToolCallFormat f;
  if (name == "hermes") {
    f.name = "hermes";  // Hermes, Qwen2.5, Qwen3: <tool_call>\n{...}\n</tool_call>
    f.start = "<tool_call>";
    f.end = "</tool_call>";
    f.syntax =
        structured::ToolCallSyntax{"<tool_call>\n", "\n</tool_call>", "\n", "", "", "arguments"};
  } else if (name == "llama3_json") {  // Llama 3.1 / 3.2: {"name", "parameters"}; calls ";"-joined
    f.name = "llama3_json";
    f.separator = ";";
    f.syntax = structured::ToolCallSyntax{"", "", "; ", "", "", "parameters"};
  } else if (name == "mistral") {  // [TOOL_CALLS][{"name", "arguments"}, ...]
    f.name = "mistral";
    f.start = "[TOOL_CALLS]";
    f.list = true;
    f.syntax = structured::ToolCallSyntax{"", "", ", ", "[TOOL_CALLS][", "]", "arguments"};
  } else if (name == "pythonic") {  // Gemma 3, Llama 3.2 pythonic: [f(a=1), g(b="x")]
    f.name = "pythonic";
    f.list = true;
    f.body = ToolCallFormat::Body::Pythonic;
    f.syntax = structured::ToolCallSyntax{"", "", ", ", "[", "]", "", /*python=*/true};
  } else if (name == "gemma_tool_code") {  // Gemma's code blocks: ```tool_code\nf(a=1)\n```
    f.name = "gemma_tool_code";
    f.start = "```tool_code";
    f.end = "```";
    f.body = ToolCallFormat::Body::Pythonic;
    f.syntax =
        structured::ToolCallSyntax{"```tool_code\n", "\n```", "\n", "", "", "", /*python=*/true};
  } else {
    return std::nullopt;
  }
  return f;
}

std::vector<std::string> tool_call_format_names() {
  return {"hermes", "llama3_json", "mistral", "pythonic", "gemma_tool_code"};
}

ToolCallFormat detect_tool_call_format(std::string_view tpl) {
  if (tpl.find("[TOOL_CALLS]") != std::string_view::npos) return *tool_call_format("mistral");
  if (tpl.find("<tool_call>") != std::string_view::npos) return *tool_call_format("hermes");
  if (tpl.find("<|python_tag|>") != std::string_view::npos ||
      (tpl.find("<|start_header_id|>") != std::string_view::npos &&
       tpl.find("\"parameters\"") != std::string_view::npos))
    return *tool_call_format("llama3_json");
  if (tpl.find("tool_code") != std::string_view::npos) return *tool_call_format("gemma_tool_code");
  if (tpl.find("<start_of_turn>") != std::string_view::npos) return *tool_call_format("pythonic");
  return *tool_call_format("hermes");
}

ToolCallParser::ToolCallParser(ToolCallFormat format) : format_(std::move(format)) {}

ParsedDelta ToolCallParser::push(std::string_view text) {
  buf_ += text;
  ParsedDelta out;
  parse(out, false);
  return out;
}

ParsedDelta ToolCallParser::finish() {
  ParsedDelta out;
  parse(out, true);
  if (!buf_.empty()) {
    // An unfinished call: its text is content unless part of it was reported.
    if (!call_open_) out.content += raw_ + buf_;
    raw_.clear();
    buf_.clear();
  }
  return out;
}

void ToolCallParser::parse(ParsedDelta& out, bool at_end) {
  for (;;) {
    const bool progressed = state_ == State::Content ? parse_content(out, at_end)
                            : state_ == State::Calls ? parse_calls(out, at_end)
                                                     : false;
    if (state_ == State::Done) {
      out.content += raw_ + buf_;
      raw_.clear();
      buf_.clear();
      return;
    }
    if (!progressed) return;
  }
}

bool ToolCallParser::parse_content(ParsedDelta& out, bool at_end) {
  if (buf_.empty()) return false;
  if (format_.start.empty()) {
    // Calls only at the very start of the output.
    if (seen_text_) {
      state_ = State::Done;
      return true;
    }
    const size_t i = skip_space(buf_, 0);
    if (i == buf_.size()) {
      if (at_end) {
        out.content += buf_;
        buf_.clear();
      }
      return false;
    }
    const char c = buf_[i];
    const bool json_call = format_.body == ToolCallFormat::Body::Json && c == '{';
    bool python_call = false;
    if (format_.body == ToolCallFormat::Body::Pythonic && c == '[') {
      size_t j = skip_space(buf_, i + 1), k = j;
      while (k < buf_.size() && ident_char(buf_[k])) ++k;
      if (k == buf_.size() && !at_end) return false;  // undecided yet
      python_call = k > j && k < buf_.size() && buf_[k] == '(';
    }
    if (json_call || python_call) {
      buf_.erase(0, i);
      state_ = State::Calls;
      in_list_ = false;
      return true;
    }
    seen_text_ = true;
    state_ = State::Done;
    return true;
  }
  const size_t at = buf_.find(format_.start);
  if (at != std::string::npos) {
    out.content += buf_.substr(0, at);
    raw_ = format_.start;
    buf_.erase(0, at + format_.start.size());
    state_ = State::Calls;
    in_list_ = false;
    return true;
  }
  const size_t hold = at_end ? 0 : marker_prefix_at_end(buf_, format_.start);
  out.content += buf_.substr(0, buf_.size() - hold);
  buf_.erase(0, buf_.size() - hold);
  return false;
}

bool ToolCallParser::parse_calls(ParsedDelta& out, bool at_end) {
  size_t i = skip_space(buf_, 0);
  if (i == buf_.size()) return false;
  if (format_.list && !in_list_) {
    if (buf_[i] != '[') {  // not a list after all: content
      leave_calls(out);
      return true;
    }
    in_list_ = true;
    raw_ += buf_.substr(0, i + 1);
    buf_.erase(0, i + 1);
    return true;
  }
  if (in_list_ && (buf_[i] == ',' || buf_[i] == ']')) {
    const bool close = buf_[i] == ']';
    buf_.erase(0, i + 1);
    if (close) {
      in_list_ = false;
      raw_.clear();
      state_ = format_.start.empty() ? State::Done : State::Content;
    }
    return true;
  }
  if (after_call_) {
    // Just after a call: its end marker, a separator, or the end of the calls.
    const std::string_view rest = std::string_view(buf_).substr(i);
    auto starts = [&](const std::string& m) { return !m.empty() && rest.substr(0, m.size()) == m; };
    auto partial = [&](const std::string& m) {
      return !m.empty() && rest.size() < m.size() && m.compare(0, rest.size(), rest) == 0;
    };
    if (starts(format_.end)) {
      buf_.erase(0, i + format_.end.size());
      if (format_.separator.empty()) {
        after_call_ = false;
        if (!format_.start.empty()) state_ = State::Content;
      }
      return true;
    }
    if (starts(format_.separator)) {
      buf_.erase(0, i + format_.separator.size());
      after_call_ = false;
      return true;
    }
    if (!at_end && (partial(format_.end) || partial(format_.separator))) return false;
    after_call_ = false;
    raw_.clear();
    state_ = format_.start.empty() ? State::Done : State::Content;
    return true;
  }
  raw_ += buf_.substr(0, i);
  buf_.erase(0, i);
  return format_.body == ToolCallFormat::Body::Json ? parse_json_call(out, at_end)
                                                    : parse_python_call(out, at_end);
}

void ToolCallParser::leave_calls(ParsedDelta& out) {
  out.content += raw_;
  raw_.clear();
  state_ = format_.start.empty() ? State::Done : State::Content;
}

void ToolCallParser::emit_call_start(ParsedDelta& out, const std::string& name) {
  raw_.clear();
  out.tool_calls.push_back({next_index_, make_tool_call_id(), name, ""});
  call_open_ = true;
  args_sent_ = 0;
}

bool ToolCallParser::parse_json_call(ParsedDelta& out, bool at_end) {
  if (buf_.empty() || buf_[0] != '{') {
    if (!call_open_) leave_calls(out);
    return !call_open_;
  }
  const ObjectScan scan = scan_object(buf_, format_.argument_keys);
  if (scan.malformed || (at_end && !scan.complete && !call_open_)) {
    state_ = State::Done;
    return true;
  }
  if (!call_open_ && scan.name) emit_call_start(out, *scan.name);
  auto delta = [&]() -> ToolCallDelta& {
    if (out.tool_calls.empty() || out.tool_calls.back().index != next_index_)
      out.tool_calls.push_back({next_index_, "", "", ""});
    return out.tool_calls.back();
  };
  if (call_open_ && scan.args_begin != std::string::npos && !scan.args_string) {
    // Stream the arguments' text as it arrives (everything scanned so far
    // belongs to the value until it is complete).
    const size_t end = scan.args_end != std::string::npos ? scan.args_end : scan.scanned;
    if (end > scan.args_begin + args_sent_) {
      delta().arguments +=
          buf_.substr(scan.args_begin + args_sent_, end - scan.args_begin - args_sent_);
      args_sent_ = end - scan.args_begin;
    }
  }
  if (!scan.complete) return false;
  if (!scan.name) {  // a JSON object that is not a call
    state_ = State::Done;
    return true;
  }
  if (scan.args_string && scan.args_end != std::string::npos) {
    json v =
        json::parse(buf_.substr(scan.args_begin, scan.args_end - scan.args_begin), nullptr, false);
    delta().arguments += v.is_string() ? v.get<std::string>() : "{}";
  } else if (scan.args_begin == std::string::npos) {
    delta().arguments += "{}";
  }
  buf_.erase(0, scan.end);
  call_open_ = false;
  after_call_ = !format_.list;
  ++next_index_;
  return true;
}

bool ToolCallParser::parse_python_call(ParsedDelta& out, bool at_end) {
  size_t k = 0;
  while (k < buf_.size() && ident_char(buf_[k])) ++k;
  if (!call_open_) {
    if (k == buf_.size() && !at_end) return false;
    if (k == 0 || k == buf_.size() || buf_[k] != '(') {
      state_ = State::Done;
      return true;
    }
    emit_call_start(out, buf_.substr(0, k));
    buf_.erase(0, k + 1);
    pending_args_.clear();
  }
  // key=value pairs, each emitted once its value is complete.
  for (;;) {
    size_t i = skip_space(buf_, 0);
    if (i == buf_.size()) return false;
    if (buf_[i] == ')') {
      out.tool_calls.push_back({next_index_, "", "", args_sent_ == 0 ? "{}" : "}"});
      buf_.erase(0, i + 1);
      call_open_ = false;
      after_call_ = !format_.list;
      ++next_index_;
      return true;
    }
    if (buf_[i] == ',') {
      buf_.erase(0, i + 1);
      continue;
    }
    size_t e = i;
    while (e < buf_.size() && ident_char(buf_[e])) ++e;
    size_t eq = skip_space(buf_, e);
    if (eq >= buf_.size()) return false;
    if (e == i || buf_[eq] != '=') {
      state_ = State::Done;  // not a keyword argument: stop parsing calls
      return true;
    }
    PyLiteral lit(buf_);
    lit.set_pos(eq + 1);
    json value;
    if (!lit.parse(&value)) {
      if (lit.malformed() || at_end) {
        state_ = State::Done;
        return true;
      }
      return false;
    }
    const std::string piece = fmt::format("{}{}: {}", args_sent_ == 0 ? "{" : ", ",
                                          json(buf_.substr(i, e - i)).dump(), value.dump());
    out.tool_calls.push_back({next_index_, "", "", piece});
    args_sent_ += piece.size();
    buf_.erase(0, lit.pos());
  }
}

}  // namespace loom::server
