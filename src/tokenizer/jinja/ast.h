// Template syntax tree. Expressions and statements are plain structs tagged
// by kind; the parser owns them through unique_ptr and the evaluator walks
// them read-only, so one parsed template can render on many threads.
#pragma once

#include "tokenizer/jinja/value.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace loom::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind : uint8_t {
  kLiteral,
  kName,
  kList,  // list or tuple literal
  kDict,
  kGetAttr,
  kGetItem,
  kSlice,  // only as GetItem's index
  kUnary,
  kBinary,
  kCompare,
  kCondExpr,
  kCall,
  kFilter,
  kTest,
};

enum class Op : uint8_t {
  kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat, kAnd, kOr,  // binary
  kNeg, kPos, kNot,                                                   // unary
  kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn,                          // compare
};

struct Expr {
  Expr(ExprKind k, int l) : kind(k), line(l) {}
  virtual ~Expr() = default;
  ExprKind kind;
  int line;
};

struct Args {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  ExprPtr star_args;    // *args
  ExprPtr star_kwargs;  // **kwargs
};

struct LiteralExpr : Expr {
  LiteralExpr(int l, Value v) : Expr(ExprKind::kLiteral, l), value(std::move(v)) {}
  Value value;
};
struct NameExpr : Expr {
  NameExpr(int l, std::string n) : Expr(ExprKind::kName, l), name(std::move(n)) {}
  std::string name;
};
struct ListExpr : Expr {
  ListExpr(int l, bool tuple) : Expr(ExprKind::kList, l), is_tuple(tuple) {}
  std::vector<ExprPtr> items;
  bool is_tuple;
};
struct DictExpr : Expr {
  explicit DictExpr(int l) : Expr(ExprKind::kDict, l) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};
struct GetAttrExpr : Expr {
  GetAttrExpr(int l, ExprPtr o, std::string n)
      : Expr(ExprKind::kGetAttr, l), object(std::move(o)), name(std::move(n)) {}
  ExprPtr object;
  std::string name;
};
struct GetItemExpr : Expr {
  GetItemExpr(int l, ExprPtr o, ExprPtr i)
      : Expr(ExprKind::kGetItem, l), object(std::move(o)), index(std::move(i)) {}
  ExprPtr object;
  ExprPtr index;
};
struct SliceExpr : Expr {
  explicit SliceExpr(int l) : Expr(ExprKind::kSlice, l) {}
  ExprPtr start, stop, step;  // each may be null
};
struct UnaryExpr : Expr {
  UnaryExpr(int l, Op o, ExprPtr e) : Expr(ExprKind::kUnary, l), op(o), operand(std::move(e)) {}
  Op op;
  ExprPtr operand;
};
struct BinaryExpr : Expr {
  BinaryExpr(int l, Op o, ExprPtr a, ExprPtr b)
      : Expr(ExprKind::kBinary, l), op(o), left(std::move(a)), right(std::move(b)) {}
  Op op;
  ExprPtr left, right;
};
struct CompareExpr : Expr {
  CompareExpr(int l, ExprPtr f) : Expr(ExprKind::kCompare, l), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<Op, ExprPtr>> rest;  // chained: a < b < c
};
struct CondExpr : Expr {
  explicit CondExpr(int l) : Expr(ExprKind::kCondExpr, l) {}
  ExprPtr cond, then, otherwise;  // otherwise may be null (undefined)
};
struct CallExpr : Expr {
  CallExpr(int l, ExprPtr c) : Expr(ExprKind::kCall, l), callee(std::move(c)) {}
  ExprPtr callee;
  Args args;
};
// `operand | name(args)`; operand is null inside a `{% filter %}` block's chain
// (the block's output is the input).
struct FilterExpr : Expr {
  FilterExpr(int l, ExprPtr o, std::string n)
      : Expr(ExprKind::kFilter, l), operand(std::move(o)), name(std::move(n)) {}
  ExprPtr operand;
  std::string name;
  Args args;
};
struct TestExpr : Expr {
  TestExpr(int l, ExprPtr o, std::string n)
      : Expr(ExprKind::kTest, l), operand(std::move(o)), name(std::move(n)) {}
  ExprPtr operand;
  std::string name;
  Args args;
};

enum class StmtKind : uint8_t {
  kText,
  kPrint,
  kIf,
  kFor,
  kSet,
  kSetBlock,
  kMacro,
  kCallBlock,
  kFilterBlock,
  kBreak,
  kContinue,
  kScope,  // a body rendered in place ({% generation %})
};

struct Stmt {
  Stmt(StmtKind k, int l) : kind(k), line(l) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  int line;
};

struct TextStmt : Stmt {
  TextStmt(int l, std::string t) : Stmt(StmtKind::kText, l), text(std::move(t)) {}
  std::string text;
};
struct PrintStmt : Stmt {
  PrintStmt(int l, ExprPtr e) : Stmt(StmtKind::kPrint, l), expr(std::move(e)) {}
  ExprPtr expr;
};
struct IfStmt : Stmt {
  explicit IfStmt(int l) : Stmt(StmtKind::kIf, l) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, elif...
  Body otherwise;
};
// An assignment target: a name, `ns.attr`, or a tuple of names.
struct Target {
  std::vector<std::string> names;  // one name, or several for unpacking
  bool is_tuple = false;
  std::string attr;  // non-empty: names[0].attr (namespace assignment)
};
struct ForStmt : Stmt {
  explicit ForStmt(int l) : Stmt(StmtKind::kFor, l) {}
  Target target;
  ExprPtr iter;
  ExprPtr filter;  // `for x in y if cond`; may be null
  Body body;
  Body otherwise;
  bool uses_loop = false;  // the body names `loop`; otherwise no loop object is built
};
struct SetStmt : Stmt {
  explicit SetStmt(int l) : Stmt(StmtKind::kSet, l) {}
  Target target;
  ExprPtr value;
};
struct SetBlockStmt : Stmt {
  explicit SetBlockStmt(int l) : Stmt(StmtKind::kSetBlock, l) {}
  Target target;
  ExprPtr filter;  // chain of FilterExpr with a null innermost operand; may be null
  Body body;
};
struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};
struct MacroStmt : Stmt {
  explicit MacroStmt(int l) : Stmt(StmtKind::kMacro, l) {}
  std::string name;
  std::vector<MacroParam> params;
  Body body;
};
struct CallBlockStmt : Stmt {
  explicit CallBlockStmt(int l) : Stmt(StmtKind::kCallBlock, l) {}
  ExprPtr call;                     // a CallExpr
  std::vector<MacroParam> params;   // caller's parameters
  Body body;                        // caller's body
};
struct FilterBlockStmt : Stmt {
  explicit FilterBlockStmt(int l) : Stmt(StmtKind::kFilterBlock, l) {}
  ExprPtr filter;  // chain of FilterExpr with a null innermost operand
  Body body;
};
struct SimpleStmt : Stmt {
  SimpleStmt(StmtKind k, int l) : Stmt(k, l) {}
};
struct ScopeStmt : Stmt {
  explicit ScopeStmt(int l) : Stmt(StmtKind::kScope, l) {}
  Body body;
};

}  // namespace loom::jinja
