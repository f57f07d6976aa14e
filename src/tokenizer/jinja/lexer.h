// Template lexer: splits source into text and tag tokens, applying jinja2's
// whitespace control as transformers configures it (trim_blocks and
// lstrip_blocks on, `-`/`+` modifiers, newlines normalised to \n, one
// trailing newline dropped). Raw blocks become text; comments disappear.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::jinja {

enum class Tok : uint8_t {
  kText,
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,
  kInt,
  kFloat,
  kOp,  // operators and punctuation, text holds it
  kEof,
};

struct Token {
  Tok type;
  std::string text;  // text, name, decoded string literal, or operator
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
};

// Throws loom::Error (with the line) on unterminated tags, comments or strings
// and on characters that cannot start a token.
std::vector<Token> tokenize(const std::string& source);

}  // namespace loom::jinja
