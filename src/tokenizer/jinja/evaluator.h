// Tree-walking evaluator. One Renderer renders one template once, on one
// thread; it owns the scopes, the output buffer and the budgets (steps,
// output bytes, nesting depth), and throws loom::Error when one runs out.
// Filters, tests and methods (filters.cpp, methods.cpp) call back into it.
#pragma once

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/jinja/value.h"

#include <optional>
#include <string>
#include <unordered_map>

namespace loom::jinja {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
};
using ScopePtr = std::shared_ptr<Scope>;

class Renderer {
 public:
  Renderer(const TemplateLimits& limits, std::optional<int64_t> fixed_now);
  ~Renderer();
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  // Renders `body` with `context` (a dict) as the global variables.
  std::string render(const Body& body, const Value& context);

  // Budgets. charge() counts evaluation steps; charge_bytes() charges the
  // work of building a string or list of n bytes/items and checks it fits.
  void charge(int64_t steps);
  void charge_bytes(size_t n);
  // Largest string or collection a render may build.
  size_t max_bytes() const { return static_cast<size_t>(limits_.max_output_bytes); }
  size_t max_items() const;
  int max_depth() const { return limits_.max_depth; }
  std::optional<int64_t> fixed_now() const { return fixed_now_; }

  Value call(const Value& callee, CallArgs& args);
  Value apply_filter(const std::string& name, const Value& input, CallArgs& args);
  bool apply_test(const std::string& name, const Value& v, CallArgs& args);
  // Records a namespace so its (possibly self-referencing) contents are
  // released when rendering ends.
  void track_namespace(const DictPtr& ns) { namespaces_.push_back(ns); }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  struct DepthGuard;

  Flow exec_body(const Body& body);
  Flow exec(const Stmt& s);
  void exec_for(const struct ForStmt& s);
  void assign(const struct Target& t, const Value& v, int line);
  std::string capture(const Body& body);
  void write(const std::string& s);

  Value eval(const Expr& e);
  Value eval_binary(const struct BinaryExpr& e);
  Value eval_compare(const struct CompareExpr& e);
  Value eval_getitem(const struct GetItemExpr& e);
  CallArgs eval_args(const Args& a);
  Value make_macro(const std::vector<struct MacroParam>& params, const Body& body,
                   const std::string& name);
  Value lookup(const std::string& name) const;

  TemplateLimits limits_;
  std::optional<int64_t> fixed_now_;
  int64_t steps_ = 0;
  int depth_ = 0;
  int call_depth_ = 0;
  ScopePtr scope_;
  std::string* out_ = nullptr;
  std::vector<DictPtr> namespaces_;
};

// raise_exception(): throws an error whose message reaches the caller as is.
[[noreturn]] void throw_raised(const std::string& message);
// Error for using an undefined value, as jinja2 words it.
[[noreturn]] void throw_undefined(const Value& v);

// Attribute access (`obj.name`) with the sandbox rules: names starting with
// '_' are refused; dict/str/list methods become bound callables.
Value get_attr(Renderer& r, const Value& obj, const std::string& name);
// Subscript (`obj[key]`); missing keys and indexes give undefined.
Value get_item(Renderer& r, const Value& obj, const Value& key);
// Python slice of a string or list.
Value slice_value(Renderer& r, const Value& obj, const Value& start, const Value& stop,
                  const Value& step);
// Items of an iterable as Python iterates it (dict: keys; str: code points).
std::vector<Value> iterate(Renderer& r, const Value& v);
// Global functions: range, namespace, dict, raise_exception, strftime_now.
void add_builtins(Scope& globals);
// printf-style formatting (`"%s" % x`, |format).
std::string percent_format(Renderer& r, const std::string& fmt, const std::vector<Value>& args);

// Binds call arguments to parameter names (positional first, then keyword);
// missing ones are undefined. Throws on unknown keywords or extra positionals.
std::vector<Value> bind_args(const CallArgs& args, std::initializer_list<const char*> names,
                             const char* fn_name);

}  // namespace loom::jinja
