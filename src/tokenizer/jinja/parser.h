// Template parser: tokens to a statement tree, following jinja2's grammar and
// operator precedence. Nesting deeper than max_depth is a syntax error, so a
// hostile template cannot overflow the stack while parsing or rendering.
#pragma once

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

#include <vector>

namespace loom::jinja {

// Throws loom::Error ("template syntax error at line N: ...").
Body parse(const std::vector<Token>& tokens, int max_depth);

}  // namespace loom::jinja
