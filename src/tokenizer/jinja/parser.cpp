// Recursive-descent parser (see parser.h). Precedence, lowest first, as in
// jinja2: conditional expression, or, and, not, comparisons (in, not in,
// ==...), + -, ~, * / // %, **, unary - +, then primaries with postfix
// access (. [] ()) and filters/tests (| is).
#include "tokenizer/jinja/parser.h"

#include "core/error.h"

#include <initializer_list>

namespace loom::jinja {

namespace {

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, int max_depth) : toks_(tokens), max_depth_(max_depth) {}

  Body parse_template() {
    Body body = parse_body({});
    if (cur().type != Tok::kEof) fail("unexpected tag '" + cur().text + "'");
    return body;
  }

 private:
  // Counts nesting on entry to recursive rules.
  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p_(p) {
      if (++p_->depth_ > p_->max_depth_) p_->fail("template nested too deeply");
    }
    ~DepthGuard() { --p_->depth_; }
    Parser* p_;
  };

  [[noreturn]] void fail(const std::string& msg) const {
    LOOM_THROW("template syntax error at line {}: {}", cur().line, msg);
  }

  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t n = 1) const {
    return toks_[pos_ + n < toks_.size() ? pos_ + n : toks_.size() - 1];
  }
  void next() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::kName && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::kEof:
        return "end of template";
      case Tok::kVarEnd:
        return "'}}'";
      case Tok::kBlockEnd:
        return "'%}'";
      case Tok::kVarBegin:
        return "'{{'";
      case Tok::kBlockBegin:
        return "'{%'";
      case Tok::kText:
        return "text";
      default:
        return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != Tok::kName) fail("expected a name, got " + describe(cur()));
    std::string n = cur().text;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().type != Tok::kBlockEnd) fail("expected '%}', got " + describe(cur()));
    next();
  }

  // ---- statements ----

  // Parses until `{% <one of end_tags>`; leaves the position at that tag name.
  Body parse_body(std::initializer_list<const char*> end_tags) {
    DepthGuard guard(this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::kEof) {
        if (end_tags.size() == 0) return body;
        fail(std::string("unexpected end of template, expected '") + *end_tags.begin() + "'");
      }
      if (t.type == Tok::kText) {
        body.push_back(std::make_unique<TextStmt>(t.line, t.text));
        next();
      } else if (t.type == Tok::kVarBegin) {
        int line = t.line;
        next();
        ExprPtr e = parse_tuple(true, {}, false);
        if (cur().type != Tok::kVarEnd) fail("expected '}}', got " + describe(cur()));
        next();
        body.push_back(std::make_unique<PrintStmt>(line, std::move(e)));
      } else if (t.type == Tok::kBlockBegin) {
        const Token& name = peek();
        if (name.type != Tok::kName) {
          next();
          fail("expected a tag name, got " + describe(cur()));
        }
        for (const char* end : end_tags) {
          if (name.text == end) {
            next();
            return body;
          }
        }
        next();
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(t));
      }
    }
  }

  StmtPtr parse_statement() {
    const std::string tag = cur().text;
    int line = cur().line;
    next();
    if (tag == "if") return parse_if(line);
    if (tag == "for") return parse_for(line);
    if (tag == "set") return parse_set(line);
    if (tag == "macro") return parse_macro(line);
    if (tag == "call") return parse_call_block(line);
    if (tag == "filter") return parse_filter_block(line);
    if (tag == "generation") {
      auto s = std::make_unique<ScopeStmt>(line);
      expect_block_end();
      s->body = parse_body({"endgeneration"});
      next();
      expect_block_end();
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail("'" + tag + "' outside of a loop");
      expect_block_end();
      return std::make_unique<SimpleStmt>(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue,
                                          line);
    }
    --pos_;
    fail("unknown or unsupported tag '" + tag + "'");
  }

  StmtPtr parse_if(int line) {
    auto s = std::make_unique<IfStmt>(line);
    while (true) {
      ExprPtr cond = parse_tuple(false, {}, false);
      expect_block_end();
      Body body = parse_body({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(cond), std::move(body));
      std::string tag = cur().text;
      next();
      if (tag == "elif") continue;
      if (tag == "else") {
        expect_block_end();
        s->otherwise = parse_body({"endif"});
        next();
      }
      expect_block_end();
      return s;
    }
  }

  Target parse_target(bool allow_attr, const char* end_name) {
    Target t;
    t.names.push_back(expect_name());
    if (allow_attr && is_op(".")) {
      next();
      t.attr = expect_name();
      return t;
    }
    while (skip_op(",")) {
      t.is_tuple = true;
      if (end_name && is_name(end_name)) break;
      if (is_op("=")) break;
      t.names.push_back(expect_name());
    }
    return t;
  }

  StmtPtr parse_for(int line) {
    auto s = std::make_unique<ForStmt>(line);
    bool paren = skip_op("(");
    s->target = parse_target(false, "in");
    if (paren) expect_op(")");
    if (!skip_name("in")) fail("expected 'in', got " + describe(cur()));
    s->iter = parse_tuple(false, {"recursive"}, false);
    if (skip_name("if")) s->filter = parse_expression(true);
    if (is_name("recursive")) fail("recursive loops are not supported");
    expect_block_end();
    ++loop_depth_;
    int refs_before = loop_refs_;
    s->body = parse_body({"endfor", "else"});
    s->uses_loop = loop_refs_ != refs_before;
    --loop_depth_;
    if (cur().text == "else") {
      next();
      expect_block_end();
      s->otherwise = parse_body({"endfor"});
    }
    next();
    expect_block_end();
    return s;
  }

  StmtPtr parse_set(int line) {
    Target target = parse_target(true, nullptr);
    if (skip_op("=")) {
      auto s = std::make_unique<SetStmt>(line);
      s->target = std::move(target);
      s->value = parse_tuple(true, {}, false);
      expect_block_end();
      return s;
    }
    auto s = std::make_unique<SetBlockStmt>(line);
    s->target = std::move(target);
    if (is_op("|")) s->filter = parse_filter_chain(nullptr);
    expect_block_end();
    s->body = parse_body({"endset"});
    next();
    expect_block_end();
    return s;
  }

  std::vector<MacroParam> parse_params() {
    std::vector<MacroParam> params;
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam p;
      p.name = expect_name();
      if (skip_op("=")) p.default_value = parse_expression(true);
      params.push_back(std::move(p));
    }
    expect_op(")");
    return params;
  }

  StmtPtr parse_macro(int line) {
    auto s = std::make_unique<MacroStmt>(line);
    s->name = expect_name();
    s->params = parse_params();
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endmacro"});
    loop_depth_ = saved;
    next();
    if (cur().type == Tok::kName && cur().text == s->name) next();
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block(int line) {
    auto s = std::make_unique<CallBlockStmt>(line);
    if (is_op("(")) s->params = parse_params();
    s->call = parse_expression(true);
    if (s->call->kind != ExprKind::kCall) fail("expected a call after 'call'");
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endcall"});
    loop_depth_ = saved;
    next();
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block(int line) {
    auto s = std::make_unique<FilterBlockStmt>(line);
    s->filter = parse_filter_chain(nullptr, /*leading_pipe=*/false);
    expect_block_end();
    s->body = parse_body({"endfilter"});
    next();
    expect_block_end();
    return s;
  }

  // `| f(args) | g ...` applied to `operand` (null for block filters).
  ExprPtr parse_filter_chain(ExprPtr operand, bool leading_pipe = true) {
    bool first = true;
    while (true) {
      if (!(first && !leading_pipe)) {
        if (!skip_op("|")) break;
      }
      first = false;
      operand = parse_filter(std::move(operand));
    }
    return operand;
  }

  ExprPtr parse_filter(ExprPtr operand) {
    int line = cur().line;
    std::string name = expect_name();
    while (skip_op(".")) {
      name.push_back('.');
      name.append(expect_name());
    }
    auto f = std::make_unique<FilterExpr>(line, std::move(operand), std::move(name));
    if (is_op("(")) f->args = parse_call_args();
    return f;
  }

  // ---- expressions ----

  ExprPtr parse_expression(bool with_condexpr) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  bool is_tuple_end(std::initializer_list<const char*> extra_end) const {
    if (cur().type == Tok::kVarEnd || cur().type == Tok::kBlockEnd || cur().type == Tok::kEof)
      return true;
    if (is_op(")")) return true;
    for (const char* n : extra_end)
      if (is_name(n)) return true;
    return false;
  }

  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<const char*> extra_end,
                      bool explicit_parens) {
    int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail("expected an expression, got " + describe(cur()));
    }
    auto t = std::make_unique<ListExpr>(line, true);
    t->items = std::move(items);
    return t;
  }

  ExprPtr parse_condexpr() {
    DepthGuard guard(this);
    int line = cur().line;
    ExprPtr expr = parse_or();
    while (skip_name("if")) {
      auto c = std::make_unique<CondExpr>(line);
      c->then = std::move(expr);
      c->cond = parse_or();
      if (skip_name("else")) c->otherwise = parse_condexpr();
      expr = std::move(c);
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      int line = cur().line;
      next();
      left = std::make_unique<BinaryExpr>(line, Op::kOr, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      int line = cur().line;
      next();
      left = std::make_unique<BinaryExpr>(line, Op::kAnd, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    DepthGuard guard(this);
    if (is_name("not")) {
      int line = cur().line;
      next();
      return std::make_unique<UnaryExpr>(line, Op::kNot, parse_not());
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr first = parse_math1();
    std::unique_ptr<CompareExpr> cmp;
    while (true) {
      Op op;
      if (is_op("==")) op = Op::kEq;
      else if (is_op("!=")) op = Op::kNe;
      else if (is_op("<")) op = Op::kLt;
      else if (is_op("<=")) op = Op::kLe;
      else if (is_op(">")) op = Op::kGt;
      else if (is_op(">=")) op = Op::kGe;
      else if (is_name("in")) op = Op::kIn;
      else if (is_name("not") && peek().type == Tok::kName && peek().text == "in") {
        next();
        op = Op::kNotIn;
      } else {
        break;
      }
      next();
      if (!cmp) cmp = std::make_unique<CompareExpr>(line, std::move(first));
      cmp->rest.emplace_back(op, parse_math1());
    }
    if (cmp) return cmp;
    return first;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      Op op = is_op("+") ? Op::kAdd : Op::kSub;
      int line = cur().line;
      next();
      left = std::make_unique<BinaryExpr>(line, op, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      int line = cur().line;
      next();
      left = std::make_unique<BinaryExpr>(line, Op::kConcat, std::move(left), parse_math2());
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      Op op = is_op("*") ? Op::kMul : is_op("/") ? Op::kDiv : is_op("//") ? Op::kFloorDiv : Op::kMod;
      int line = cur().line;
      next();
      left = std::make_unique<BinaryExpr>(line, op, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      int line = cur().line;
      next();
      left = std::make_unique<BinaryExpr>(line, Op::kPow, std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(this);
    int line = cur().line;
    ExprPtr node;
    if (is_op("-")) {
      next();
      node = std::make_unique<UnaryExpr>(line, Op::kNeg, parse_unary(false));
    } else if (is_op("+")) {
      next();
      node = std::make_unique<UnaryExpr>(line, Op::kPos, parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    int line = t.line;
    switch (t.type) {
      case Tok::kName: {
        std::string n = t.text;
        next();
        if (n == "true" || n == "True") return std::make_unique<LiteralExpr>(line, Value(true));
        if (n == "false" || n == "False") return std::make_unique<LiteralExpr>(line, Value(false));
        if (n == "none" || n == "None") return std::make_unique<LiteralExpr>(line, Value::none());
        if (n == "loop") ++loop_refs_;
        return std::make_unique<NameExpr>(line, std::move(n));
      }
      case Tok::kString: {
        std::string s = t.text;
        next();
        while (cur().type == Tok::kString) {
          s += cur().text;
          next();
        }
        return std::make_unique<LiteralExpr>(line, Value(std::move(s)));
      }
      case Tok::kInt: {
        int64_t v = t.int_value;
        next();
        return std::make_unique<LiteralExpr>(line, Value(v));
      }
      case Tok::kFloat: {
        double v = t.float_value;
        next();
        return std::make_unique<LiteralExpr>(line, Value(v));
      }
      case Tok::kOp:
        if (t.text == "(") {
          next();
          ExprPtr e = parse_tuple(true, {}, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          next();
          auto l = std::make_unique<ListExpr>(line, false);
          while (!is_op("]")) {
            if (!l->items.empty()) expect_op(",");
            if (is_op("]")) break;
            l->items.push_back(parse_expression(true));
          }
          expect_op("]");
          return l;
        }
        if (t.text == "{") {
          next();
          auto d = std::make_unique<DictExpr>(line);
          while (!is_op("}")) {
            if (!d->items.empty()) expect_op(",");
            if (is_op("}")) break;
            ExprPtr k = parse_expression(true);
            expect_op(":");
            ExprPtr v = parse_expression(true);
            d->items.emplace_back(std::move(k), std::move(v));
          }
          expect_op("}");
          return d;
        }
        break;
      default:
        break;
    }
    fail("unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      int line = cur().line;
      if (is_op(".")) {
        next();
        if (cur().type == Tok::kName) {
          node = std::make_unique<GetAttrExpr>(line, std::move(node), cur().text);
          next();
        } else if (cur().type == Tok::kInt) {
          auto idx = std::make_unique<LiteralExpr>(line, Value(cur().int_value));
          next();
          node = std::make_unique<GetItemExpr>(line, std::move(node), std::move(idx));
        } else {
          fail("expected an attribute name after '.'");
        }
      } else if (is_op("[")) {
        next();
        std::vector<ExprPtr> idx;
        while (!is_op("]")) {
          if (!idx.empty()) expect_op(",");
          if (is_op("]")) break;
          idx.push_back(parse_subscribed());
        }
        expect_op("]");
        if (idx.empty()) fail("expected a subscript");
        ExprPtr index;
        if (idx.size() == 1) {
          index = std::move(idx[0]);
        } else {
          auto t = std::make_unique<ListExpr>(line, true);
          t->items = std::move(idx);
          index = std::move(t);
        }
        node = std::make_unique<GetItemExpr>(line, std::move(node), std::move(index));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscribed() {
    int line = cur().line;
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return start;
    }
    next();  // ':'
    auto s = std::make_unique<SliceExpr>(line);
    s->start = std::move(start);
    if (!is_op("]") && !is_op(",") && !is_op(":")) s->stop = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) s->step = parse_expression(true);
    }
    return s;
  }

  ExprPtr parse_call(ExprPtr callee) {
    int line = cur().line;
    auto c = std::make_unique<CallExpr>(line, std::move(callee));
    c->args = parse_call_args();
    return c;
  }

  Args parse_call_args() {
    Args args;
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      first = false;
      if (skip_op("*")) {
        args.star_args = parse_expression(true);
      } else if (skip_op("**")) {
        args.star_kwargs = parse_expression(true);
      } else if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == "=") {
        std::string key = cur().text;
        next();
        next();
        args.keyword.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!args.keyword.empty()) fail("positional argument after keyword argument");
        args.positional.push_back(parse_expression(true));
      }
    }
    expect_op(")");
    return args;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        next();
        node = parse_filter(std::move(node));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_test(ExprPtr node) {
    int line = cur().line;
    next();  // 'is'
    bool negated = skip_name("not");
    std::string name = expect_name();
    while (skip_op(".")) {
      name.push_back('.');
      name.append(expect_name());
    }
    auto t = std::make_unique<TestExpr>(line, std::move(node), std::move(name));
    const Token& c = cur();
    if (is_op("(")) {
      t->args = parse_call_args();
    } else if ((c.type == Tok::kName || c.type == Tok::kString || c.type == Tok::kInt ||
                c.type == Tok::kFloat || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("you cannot chain multiple tests with 'is'");
      ExprPtr arg = parse_postfix(parse_primary());
      t->args.positional.push_back(std::move(arg));
    }
    if (negated) return std::make_unique<UnaryExpr>(line, Op::kNot, std::move(t));
    return t;
  }

  const std::vector<Token>& toks_;
  size_t pos_ = 0;
  int max_depth_;
  int depth_ = 0;
  int loop_depth_ = 0;
  int loop_refs_ = 0;  // `loop` names seen so far
};

}  // namespace

Body parse(const std::vector<Token>& tokens, int max_depth) {
  return Parser(tokens, max_depth).parse_template();
}

}  // namespace loom::jinja
