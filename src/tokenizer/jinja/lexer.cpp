// Template lexer (see lexer.h). The whitespace rules follow jinja2's lexer:
// `{%-`/`{{-`/`{#-` strip all whitespace before the tag, `-%}` etc. all after;
// trim_blocks drops one newline after a block or comment tag (unless `+%}`);
// lstrip_blocks drops spaces/tabs between a line start and a block or
// comment tag (unless `{%+`).
#include "tokenizer/jinja/lexer.h"

#include "core/error.h"
#include "tokenizer/jinja/pystr.h"

#include <cstring>

namespace loom::jinja {

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

std::string normalize_newlines(const std::string& in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '\r') {
      out += '\n';
      if (i + 1 < in.size() && in[i + 1] == '\n') ++i;
    } else {
      out += in[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

class Lexer {
 public:
  explicit Lexer(const std::string& source) : src_(normalize_newlines(source)) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) lex_data();
    push(Tok::kEof, "");
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    LOOM_THROW("template syntax error at line {}: {}", line_, msg);
  }

  void push(Tok t, std::string text) {
    Token tok;
    tok.type = t;
    tok.text = std::move(text);
    tok.line = line_;
    tokens_.push_back(std::move(tok));
  }

  void advance_to(size_t p) {
    for (size_t i = pos_; i < p && i < src_.size(); ++i) line_ += src_[i] == '\n';
    pos_ = p;
  }

  void skip_ws_after_tag() {
    size_t p = pos_;
    while (p < src_.size() && is_ws(src_[p])) ++p;
    advance_to(p);
  }

  // Consumes the end of a block/comment tag at pos_ (already past `%}`/`#}`),
  // applying `-` (strip all) or trim_blocks (one newline) unless `+`.
  void after_tag_end(char modifier, bool trim) {
    if (modifier == '-') {
      skip_ws_after_tag();
    } else if (trim && modifier != '+' && pos_ < src_.size() && src_[pos_] == '\n') {
      advance_to(pos_ + 1);
    }
    line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n';
  }

  // Text before a tag, with the tag's left-side whitespace rule applied.
  void emit_text(std::string text, char tag_kind, char modifier) {
    if (modifier == '-') {
      size_t e = text.size();
      while (e > 0 && is_ws(text[e - 1])) --e;
      text.resize(e);
    } else if (modifier != '+' && tag_kind != '{') {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting_) {
        bool only_ws = l_pos < text.size();
        for (size_t i = l_pos; i < text.size(); ++i)
          if (!is_ws(text[i])) only_ws = false;
        if (only_ws) text.resize(l_pos);
      }
    }
    if (!text.empty()) push(Tok::kText, std::move(text));
  }

  void lex_data() {
    size_t start = pos_;
    size_t p = pos_;
    while (true) {
      p = src_.find('{', p);
      if (p == std::string::npos || p + 1 >= src_.size()) {
        std::string text = src_.substr(start);
        advance_to(src_.size());
        if (!text.empty()) push(Tok::kText, std::move(text));
        return;
      }
      char k = src_[p + 1];
      if (k == '{' || k == '%' || k == '#') break;
      ++p;
    }
    char kind = src_[p + 1];
    char modifier = p + 2 < src_.size() ? src_[p + 2] : '\0';
    if (modifier != '-' && modifier != '+') modifier = '\0';
    if (kind == '{' && modifier == '+') modifier = '\0';  // `{{+1}}` is unary plus
    std::string text = src_.substr(start, p - start);
    int text_line = line_;
    advance_to(p);
    // Text tokens carry the line they start on.
    size_t before = tokens_.size();
    emit_text(std::move(text), kind, modifier);
    if (tokens_.size() > before) tokens_.back().line = text_line;
    advance_to(p + 2 + (modifier ? 1 : 0));
    if (kind == '#') {
      lex_comment();
    } else if (kind == '{') {
      push(Tok::kVarBegin, "{{");
      lex_tag('}');
    } else if (!try_raw()) {
      push(Tok::kBlockBegin, "{%");
      lex_tag('%');
    }
  }

  void lex_comment() {
    size_t e = src_.find("#}", pos_);
    if (e == std::string::npos) fail("unterminated comment");
    char modifier = e > pos_ && (src_[e - 1] == '-' || src_[e - 1] == '+') ? src_[e - 1] : '\0';
    advance_to(e + 2);
    after_tag_end(modifier, true);
  }

  // `{% raw %}...{% endraw %}`: the body is text, untouched.
  bool try_raw() {
    size_t p = pos_;
    while (p < src_.size() && is_ws(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && is_name_char(src_[p + 3])))
      return false;
    p += 3;
    while (p < src_.size() && is_ws(src_[p])) ++p;
    char open_mod = '\0';
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) open_mod = src_[p++];
    if (src_.compare(p, 2, "%}") != 0) fail("expected '%}' after 'raw'");
    advance_to(p + 2);
    after_tag_end(open_mod, true);
    // Find `{%[-+]? endraw [-+]?%}`.
    size_t q = pos_;
    while (true) {
      q = src_.find("{%", q);
      if (q == std::string::npos) fail("missing endraw");
      size_t r = q + 2;
      char mod = '\0';
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) mod = src_[r++];
      while (r < src_.size() && is_ws(src_[r])) ++r;
      if (src_.compare(r, 6, "endraw") != 0) {
        q += 2;
        continue;
      }
      r += 6;
      while (r < src_.size() && is_ws(src_[r])) ++r;
      char end_mod = '\0';
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) end_mod = src_[r++];
      if (src_.compare(r, 2, "%}") != 0) fail("expected '%}' after 'endraw'");
      std::string body = src_.substr(pos_, q - pos_);
      int body_line = line_;
      size_t before = tokens_.size();
      emit_text(std::move(body), '%', mod);
      if (tokens_.size() > before) tokens_.back().line = body_line;
      advance_to(r + 2);
      after_tag_end(end_mod, true);
      return true;
    }
  }

  void lex_tag(char end_kind) {
    int depth = 0;  // open brackets: `}}` inside a dict literal is not an end
    while (true) {
      while (pos_ < src_.size() && is_ws(src_[pos_])) advance_to(pos_ + 1);
      if (pos_ >= src_.size()) fail(end_kind == '}' ? "unterminated '{{'" : "unterminated '{%'");
      char c = src_[pos_];
      if (depth == 0) {
        char mod = (c == '-' || c == '+') ? c : '\0';
        size_t q = pos_ + (mod ? 1 : 0);
        if (q + 1 < src_.size() && src_[q] == end_kind && src_[q + 1] == '}' &&
            !(end_kind == '}' && mod == '+')) {
          advance_to(q + 2);
          if (end_kind == '}') {
            push(Tok::kVarEnd, "}}");
            if (mod == '-') skip_ws_after_tag();
            line_starting_ = false;
            if (mod == '-') line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n';
          } else {
            push(Tok::kBlockEnd, "%}");
            after_tag_end(mod, true);
          }
          return;
        }
      }
      if (is_name_start(c)) {
        size_t e = pos_;
        while (e < src_.size() && is_name_char(src_[e])) ++e;
        push(Tok::kName, src_.substr(pos_, e - pos_));
        advance_to(e);
      } else if (is_digit(c)) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string(c);
      } else {
        static const char* kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%",
                                     "~",  "<",  ">",  "=",  "(",  ")",  "[", "]", "{", "}", ",",
                                     ".",  ":",  "|"};
        bool matched = false;
        for (const char* op : kOps) {
          size_t n = std::strlen(op);
          if (src_.compare(pos_, n, op) == 0) {
            if (n == 1 && (c == '(' || c == '[' || c == '{')) ++depth;
            if (n == 1 && (c == ')' || c == ']' || c == '}')) {
              if (depth == 0) fail(std::string("unexpected '") + c + "'");
              --depth;
            }
            push(Tok::kOp, op);
            advance_to(pos_ + n);
            matched = true;
            break;
          }
        }
        if (!matched) fail(std::string("unexpected character '") + c + "'");
      }
    }
  }

  void lex_number() {
    size_t e = pos_;
    std::string digits;
    auto take_digits = [&] {
      size_t begin = e;
      while (e < src_.size() && (is_digit(src_[e]) || (src_[e] == '_' && e > begin &&
                                                       e + 1 < src_.size() && is_digit(src_[e + 1])))) {
        if (src_[e] != '_') digits += src_[e];
        ++e;
      }
    };
    take_digits();
    bool is_float = false;
    bool after_dot = !tokens_.empty() && tokens_.back().type == Tok::kOp && tokens_.back().text == ".";
    if (!after_dot && e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
      is_float = true;
      digits += '.';
      ++e;
      take_digits();
    }
    if (!after_dot && e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t f = e + 1;
      if (f < src_.size() && (src_[f] == '+' || src_[f] == '-')) ++f;
      if (f < src_.size() && is_digit(src_[f])) {
        is_float = true;
        digits += 'e';
        digits.append(src_, e + 1, f - e - 1);
        e = f;
        take_digits();
      }
    }
    Token tok;
    tok.line = line_;
    tok.text = digits;
    if (is_float) {
      tok.type = Tok::kFloat;
      tok.float_value = std::strtod(digits.c_str(), nullptr);
    } else {
      tok.type = Tok::kInt;
      errno = 0;
      unsigned long long v = std::strtoull(digits.c_str(), nullptr, 10);
      if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
        fail("integer literal too large");
      tok.int_value = static_cast<int64_t>(v);
    }
    tokens_.push_back(std::move(tok));
    advance_to(e);
  }

  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // Python string-literal escapes (jinja2 decodes literals with
  // "unicode-escape"); unknown escapes keep their backslash.
  void lex_string(char quote) {
    size_t p = pos_ + 1;
    std::string out;
    while (true) {
      if (p >= src_.size()) fail("unterminated string");
      char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) fail("unterminated string");
      char e = src_[p + 1];
      p += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\n': break;
        case 'x':
        case 'u':
        case 'U': {
          int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (int i = 0; i < n; ++i) {
            int h = p + i < src_.size() ? hex_value(src_[p + i]) : -1;
            if (h < 0) fail("truncated \\" + std::string(1, e) + " escape");
            cp = cp * 16 + static_cast<uint32_t>(h);
          }
          if (cp > 0x10ffff) fail("illegal Unicode character");
          p += n;
          append_utf8(out, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int i = 0; i < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i)
              cp = cp * 8 + static_cast<uint32_t>(src_[p++] - '0');
            append_utf8(out, cp);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    Token tok;
    tok.type = Tok::kString;
    tok.text = std::move(out);
    tok.line = line_;
    tokens_.push_back(std::move(tok));
    advance_to(p + 1);
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) { return Lexer(source).run(); }

}  // namespace loom::jinja
