// Tree-walking evaluator (see evaluator.h): statements, expressions, scopes
// and macros. Scoping follows jinja2: each for-loop iteration and each macro
// call gets a fresh scope, so `set` inside them does not leak out (templates
// use namespace() for that); `if` bodies share the enclosing scope.
#include "tokenizer/jinja/evaluator.h"

#include "core/error.h"
#include "tokenizer/jinja/pystr.h"

#include <cmath>

namespace loom::jinja {

namespace {

// An error already carrying its template line (not wrapped again).
class LocatedError : public Error {
 public:
  using Error::Error;
};

}  // namespace

// raise_exception(): its message reaches the caller unchanged.
class RaisedError : public Error {
 public:
  using Error::Error;
};

void throw_raised(const std::string& message) { throw RaisedError(message, __FILE__, __LINE__); }

void throw_undefined(const Value& v) {
  if (v.undefined_name().empty()) LOOM_THROW("value is undefined");
  LOOM_THROW("'{}' is undefined", v.undefined_name());
}

struct Renderer::DepthGuard {
  explicit DepthGuard(Renderer* r) : r_(r) {
    // Every evaluator frame counts: this bounds native stack use whatever
    // mix of macros, loops and expressions the template nests.
    if (++r_->depth_ > r_->limits_.max_depth * 4) LOOM_THROW("template recursion too deep");
  }
  ~DepthGuard() { --r_->depth_; }
  Renderer* r_;
};

Renderer::Renderer(const TemplateLimits& limits, std::optional<int64_t> fixed_now)
    : limits_(limits), fixed_now_(fixed_now) {}

Renderer::~Renderer() {
  // Break reference cycles through namespaces (`ns.self = ns`) and scopes.
  for (auto& ns : namespaces_) ns->items.clear();
}

size_t Renderer::max_items() const {
  // A Value is 16-32 bytes: a collection may take about the output budget.
  int64_t n = std::min<int64_t>(limits_.max_steps, limits_.max_output_bytes / 16);
  return static_cast<size_t>(std::max<int64_t>(n, 65536));
}

void Renderer::charge(int64_t steps) {
  steps_ += steps;
  if (steps_ > limits_.max_steps)
    LOOM_THROW("template exceeded its instruction budget ({} steps)", limits_.max_steps);
}

void Renderer::charge_bytes(size_t n) {
  if (n > max_bytes()) LOOM_THROW("template built a value too large ({} bytes)", n);
  charge(static_cast<int64_t>(n / 64));
}

std::string Renderer::render(const Body& body, const Value& context) {
  auto globals = std::make_shared<Scope>();
  add_builtins(*globals);
  if (context.is_mapping()) {
    for (const auto& [k, v] : context.dict()->items)
      if (k.is_string()) globals->vars[k.str()] = v;
  }
  scope_ = std::make_shared<Scope>();
  scope_->parent = globals;
  std::string out;
  out_ = &out;
  try {
    exec_body(body);
  } catch (...) {
    scope_.reset();
    throw;
  }
  scope_.reset();
  return out;
}

Value Renderer::lookup(const std::string& name) const {
  for (const Scope* s = scope_.get(); s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  return Value::undefined(name);
}

void Renderer::write(const std::string& s) {
  if (out_->size() + s.size() > max_bytes())
    LOOM_THROW("template output exceeds {} bytes", limits_.max_output_bytes);
  charge(static_cast<int64_t>(s.size() / 64));
  out_->append(s);
}

std::string Renderer::capture(const Body& body) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  try {
    exec_body(body);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buf;
}

Renderer::Flow Renderer::exec_body(const Body& body) {
  for (const auto& s : body) {
    Flow f = exec(*s);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Renderer::Flow Renderer::exec(const Stmt& s) {
  DepthGuard guard(this);
  charge(1);
  try {
    switch (s.kind) {
      case StmtKind::kText:
        write(static_cast<const TextStmt&>(s).text);
        return Flow::kNormal;
      case StmtKind::kPrint: {
        Value v = eval(*static_cast<const PrintStmt&>(s).expr);
        if (!v.is_undefined()) write(to_str(v));
        return Flow::kNormal;
      }
      case StmtKind::kIf: {
        const auto& st = static_cast<const IfStmt&>(s);
        for (const auto& [cond, body] : st.branches)
          if (truthy(eval(*cond))) return exec_body(body);
        return exec_body(st.otherwise);
      }
      case StmtKind::kFor:
        exec_for(static_cast<const ForStmt&>(s));
        return Flow::kNormal;
      case StmtKind::kSet: {
        const auto& st = static_cast<const SetStmt&>(s);
        assign(st.target, eval(*st.value), st.line);
        return Flow::kNormal;
      }
      case StmtKind::kSetBlock: {
        const auto& st = static_cast<const SetBlockStmt&>(s);
        Value v(capture(st.body));
        if (st.filter) {
          // Evaluate the filter chain with the captured text as innermost input.
          std::vector<const FilterExpr*> chain;
          for (const Expr* e = st.filter.get(); e; e = static_cast<const FilterExpr*>(e)->operand.get())
            chain.push_back(static_cast<const FilterExpr*>(e));
          for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
            CallArgs args = eval_args((*it)->args);
            v = apply_filter((*it)->name, v, args);
          }
        }
        assign(st.target, v, st.line);
        return Flow::kNormal;
      }
      case StmtKind::kMacro: {
        const auto& st = static_cast<const MacroStmt&>(s);
        scope_->vars[st.name] = make_macro(st.params, st.body, st.name);
        return Flow::kNormal;
      }
      case StmtKind::kCallBlock: {
        const auto& st = static_cast<const CallBlockStmt&>(s);
        const auto& call = static_cast<const CallExpr&>(*st.call);
        Value caller = make_macro(st.params, st.body, "caller");
        Value callee = eval(*call.callee);
        CallArgs args = eval_args(call.args);
        args.keyword.emplace_back("caller", caller);
        Value v = this->call(callee, args);
        if (!v.is_undefined()) write(to_str(v));
        return Flow::kNormal;
      }
      case StmtKind::kFilterBlock: {
        const auto& st = static_cast<const FilterBlockStmt&>(s);
        Value v(capture(st.body));
        std::vector<const FilterExpr*> chain;
        for (const Expr* e = st.filter.get(); e; e = static_cast<const FilterExpr*>(e)->operand.get())
          chain.push_back(static_cast<const FilterExpr*>(e));
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
          CallArgs args = eval_args((*it)->args);
          v = apply_filter((*it)->name, v, args);
        }
        if (!v.is_undefined()) write(to_str(v));
        return Flow::kNormal;
      }
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
      case StmtKind::kScope:
        return exec_body(static_cast<const ScopeStmt&>(s).body);
    }
  } catch (const RaisedError&) {
    throw;
  } catch (const LocatedError&) {
    throw;
  } catch (const Error& e) {
    throw LocatedError(fmt::format("template error at line {}: {}", s.line, e.what()), e.file(),
                       e.line());
  }
  return Flow::kNormal;
}

void Renderer::assign(const Target& t, const Value& v, int line) {
  if (!t.attr.empty()) {
    Value obj = lookup(t.names[0]);
    if (!obj.is_namespace()) LOOM_THROW("cannot assign attribute on non-namespace object");
    if (t.attr[0] == '_') LOOM_THROW("cannot assign underscore-prefixed attribute '{}'", t.attr);
    obj.dict()->set(Value(t.attr), v);
    return;
  }
  if (!t.is_tuple) {
    scope_->vars[t.names[0]] = v;
    return;
  }
  std::vector<Value> items = iterate(*this, v);
  if (items.size() != t.names.size())
    LOOM_THROW("cannot unpack {} values into {} names", items.size(), t.names.size());
  for (size_t i = 0; i < items.size(); ++i) scope_->vars[t.names[i]] = items[i];
}

namespace {

// The `loop` object of one iteration. Keys are built once per process.
Value make_loop(const std::vector<Value>& items, int64_t i) {
  static const Value kIndex("index"), kIndex0("index0"), kRevindex("revindex"),
      kRevindex0("revindex0"), kFirst("first"), kLast("last"), kLength("length"), kDepth("depth"),
      kDepth0("depth0"), kPrevitem("previtem"), kNextitem("nextitem"), kCycle("cycle");
  const int64_t n = static_cast<int64_t>(items.size());
  auto loop = std::make_shared<Dict>();
  loop->items.reserve(12);
  loop->items.emplace_back(kIndex, Value(i + 1));
  loop->items.emplace_back(kIndex0, Value(i));
  loop->items.emplace_back(kRevindex, Value(n - i));
  loop->items.emplace_back(kRevindex0, Value(n - i - 1));
  loop->items.emplace_back(kFirst, Value(i == 0));
  loop->items.emplace_back(kLast, Value(i == n - 1));
  loop->items.emplace_back(kLength, Value(n));
  loop->items.emplace_back(kDepth, Value(1));
  loop->items.emplace_back(kDepth0, Value(0));
  if (i > 0) loop->items.emplace_back(kPrevitem, items[static_cast<size_t>(i - 1)]);
  if (i + 1 < n) loop->items.emplace_back(kNextitem, items[static_cast<size_t>(i + 1)]);
  loop->items.emplace_back(kCycle, make_callable("cycle", [i](Renderer&, CallArgs& a) {
                             if (a.positional.empty()) LOOM_THROW("no items for cycling given");
                             return a.positional[static_cast<size_t>(i) % a.positional.size()];
                           }));
  return Value(std::move(loop));
}

}  // namespace

void Renderer::exec_for(const ForStmt& s) {
  Value seq = eval(*s.iter);
  std::vector<Value> items = iterate(*this, seq);
  ScopePtr outer = scope_;
  auto bind_target = [&](const Value& item) {
    if (s.target.is_tuple) {
      std::vector<Value> parts = iterate(*this, item);
      if (parts.size() != s.target.names.size())
        LOOM_THROW("cannot unpack {} values into {} loop variables", parts.size(),
                   s.target.names.size());
      for (size_t i = 0; i < parts.size(); ++i) scope_->vars[s.target.names[i]] = parts[i];
    } else {
      scope_->vars[s.target.names[0]] = item;
    }
  };
  if (s.filter) {
    std::vector<Value> kept;
    for (const Value& item : items) {
      charge(1);
      scope_ = std::make_shared<Scope>();
      scope_->parent = outer;
      try {
        bind_target(item);
        if (truthy(eval(*s.filter))) kept.push_back(item);
      } catch (...) {
        scope_ = outer;
        throw;
      }
      scope_ = outer;
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec_body(s.otherwise);
    return;
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    charge(1);
    scope_ = std::make_shared<Scope>();
    scope_->parent = outer;
    Flow f;
    try {
      bind_target(items[i]);
      if (s.uses_loop) scope_->vars["loop"] = make_loop(items, i);
      f = exec_body(s.body);
    } catch (...) {
      scope_ = outer;
      throw;
    }
    scope_ = outer;
    if (f == Flow::kBreak) break;
  }
}

Value Renderer::make_macro(const std::vector<MacroParam>& params, const Body& body,
                           const std::string& name) {
  std::weak_ptr<Scope> closure = scope_;
  const std::vector<MacroParam>* ps = &params;
  const Body* b = &body;
  return make_callable(name, [this, closure, ps, b, name](Renderer&, CallArgs& args) -> Value {
    if (++call_depth_ > limits_.max_depth) {
      --call_depth_;
      LOOM_THROW("macro '{}' recursion deeper than {}", name, limits_.max_depth);
    }
    ScopePtr saved = scope_;
    auto frame = std::make_shared<Scope>();
    ScopePtr parent = closure.lock();
    if (!parent) {
      parent = saved;
      while (parent->parent && parent->parent->parent) parent = parent->parent;
    }
    frame->parent = parent;
    size_t n_pos = args.positional.size();
    std::vector<Value> varargs;
    for (size_t i = 0; i < n_pos; ++i) {
      if (i < ps->size()) frame->vars[(*ps)[i].name] = args.positional[i];
      else varargs.push_back(args.positional[i]);
    }
    auto kwargs = std::make_shared<Dict>();
    for (auto& [k, v] : args.keyword) {
      bool found = false;
      for (size_t i = 0; i < ps->size(); ++i) {
        if ((*ps)[i].name == k) {
          if (i < n_pos) LOOM_THROW("macro '{}' got multiple values for argument '{}'", name, k);
          frame->vars[k] = v;
          found = true;
        }
      }
      if (!found) {
        if (k == "caller") frame->vars[k] = v;
        else kwargs->set(Value(k), v);
      }
    }
    scope_ = frame;
    try {
      // Defaults are evaluated in the macro's scope, left to right.
      for (const auto& p : *ps) {
        if (frame->vars.count(p.name)) continue;
        frame->vars[p.name] = p.default_value ? eval(*p.default_value) : Value::undefined(p.name);
      }
      frame->vars["varargs"] = make_list(std::move(varargs), /*is_tuple=*/true);
      frame->vars["kwargs"] = Value(kwargs);
      std::string text = capture(*b);
      scope_ = saved;
      --call_depth_;
      return Value(std::move(text));
    } catch (...) {
      scope_ = saved;
      --call_depth_;
      throw;
    }
  });
}

Value Renderer::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) throw_undefined(callee);
  if (!callee.is_callable()) LOOM_THROW("'{}' object is not callable", type_name(callee));
  charge(1);
  return callee.callable()->fn(*this, args);
}

CallArgs Renderer::eval_args(const Args& a) {
  CallArgs out;
  for (const auto& e : a.positional) out.positional.push_back(eval(*e));
  if (a.star_args) {
    for (Value& v : iterate(*this, eval(*a.star_args))) out.positional.push_back(std::move(v));
  }
  for (const auto& [k, e] : a.keyword) out.keyword.emplace_back(k, eval(*e));
  if (a.star_kwargs) {
    Value d = eval(*a.star_kwargs);
    if (!d.is_mapping()) LOOM_THROW("argument after ** must be a mapping");
    for (const auto& [k, v] : d.dict()->items) {
      if (!k.is_string()) LOOM_THROW("keywords must be strings");
      out.keyword.emplace_back(k.str(), v);
    }
  }
  return out;
}

Value Renderer::eval(const Expr& e) {
  DepthGuard guard(this);
  charge(1);
  switch (e.kind) {
    case ExprKind::kLiteral:
      return static_cast<const LiteralExpr&>(e).value;
    case ExprKind::kName:
      return lookup(static_cast<const NameExpr&>(e).name);
    case ExprKind::kList: {
      const auto& l = static_cast<const ListExpr&>(e);
      std::vector<Value> items;
      items.reserve(l.items.size());
      for (const auto& x : l.items) items.push_back(eval(*x));
      return make_list(std::move(items), l.is_tuple);
    }
    case ExprKind::kDict: {
      const auto& d = static_cast<const DictExpr&>(e);
      auto dict = std::make_shared<Dict>();
      for (const auto& [k, v] : d.items) {
        Value key = eval(*k);
        if (key.is_list() && !key.is_tuple()) LOOM_THROW("unhashable type: 'list'");
        if (key.is_mapping()) LOOM_THROW("unhashable type: 'dict'");
        dict->set(std::move(key), eval(*v));
      }
      return Value(std::move(dict));
    }
    case ExprKind::kGetAttr: {
      const auto& g = static_cast<const GetAttrExpr&>(e);
      Value obj = eval(*g.object);
      if (obj.is_undefined()) throw_undefined(obj);
      return get_attr(*this, obj, g.name);
    }
    case ExprKind::kGetItem:
      return eval_getitem(static_cast<const GetItemExpr&>(e));
    case ExprKind::kSlice:
      LOOM_THROW("slice outside of a subscript");
    case ExprKind::kUnary: {
      const auto& u = static_cast<const UnaryExpr&>(e);
      Value v = eval(*u.operand);
      if (u.op == Op::kNot) return Value(!truthy(v));
      if (v.is_undefined()) throw_undefined(v);
      if (!v.is_number()) LOOM_THROW("bad operand type for unary -/+: '{}'", type_name(v));
      if (u.op == Op::kPos) return v.is_bool() ? Value(v.as_int()) : v;
      if (v.is_float()) return Value(-v.as_double());
      if (v.as_int() == INT64_MIN) LOOM_THROW("integer overflow");
      return Value(-v.as_int());
    }
    case ExprKind::kBinary:
      return eval_binary(static_cast<const BinaryExpr&>(e));
    case ExprKind::kCompare:
      return eval_compare(static_cast<const CompareExpr&>(e));
    case ExprKind::kCondExpr: {
      const auto& c = static_cast<const CondExpr&>(e);
      if (truthy(eval(*c.cond))) return eval(*c.then);
      if (c.otherwise) return eval(*c.otherwise);
      return Value::undefined();
    }
    case ExprKind::kCall: {
      const auto& c = static_cast<const CallExpr&>(e);
      Value callee = eval(*c.callee);
      CallArgs args = eval_args(c.args);
      return call(callee, args);
    }
    case ExprKind::kFilter: {
      const auto& f = static_cast<const FilterExpr&>(e);
      Value input = f.operand ? eval(*f.operand) : Value::undefined();
      CallArgs args = eval_args(f.args);
      return apply_filter(f.name, input, args);
    }
    case ExprKind::kTest: {
      const auto& t = static_cast<const TestExpr&>(e);
      Value v = eval(*t.operand);
      CallArgs args = eval_args(t.args);
      return Value(apply_test(t.name, v, args));
    }
  }
  return Value::undefined();
}

Value Renderer::eval_getitem(const GetItemExpr& e) {
  Value obj = eval(*e.object);
  if (obj.is_undefined()) throw_undefined(obj);
  if (e.index->kind == ExprKind::kSlice) {
    const auto& s = static_cast<const SliceExpr&>(*e.index);
    Value start = s.start ? eval(*s.start) : Value::none();
    Value stop = s.stop ? eval(*s.stop) : Value::none();
    Value step = s.step ? eval(*s.step) : Value::none();
    return slice_value(*this, obj, start, stop, step);
  }
  return get_item(*this, obj, eval(*e.index));
}

namespace {

using IntOp = bool (*)(int64_t, int64_t, int64_t*);
bool add_op(int64_t a, int64_t b, int64_t* r) { return __builtin_add_overflow(a, b, r); }
bool sub_op(int64_t a, int64_t b, int64_t* r) { return __builtin_sub_overflow(a, b, r); }
bool mul_op(int64_t a, int64_t b, int64_t* r) { return __builtin_mul_overflow(a, b, r); }

// Python ints are unbounded; loom's are int64 and overflow is an error.
int64_t checked(IntOp op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op(a, b, &r)) LOOM_THROW("integer overflow");
  return r;
}

Value repeat(Renderer& r, const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const std::string& s = seq.str();
    if (!s.empty() && static_cast<uint64_t>(n) > r.max_bytes() / s.size())
      LOOM_THROW("template built a value too large ({} x {} bytes)", n, s.size());
    r.charge_bytes(s.size() * static_cast<size_t>(n));
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value(std::move(out));
  }
  const auto& items = seq.list()->items;
  if (!items.empty() && static_cast<uint64_t>(n) > r.max_items() / items.size())
    LOOM_THROW("template built a list too large ({} x {} items)", n, items.size());
  r.charge(static_cast<int64_t>(items.size()) * n);
  std::vector<Value> out;
  out.reserve(items.size() * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return make_list(std::move(out), seq.is_tuple());
}

double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

Value Renderer::eval_binary(const BinaryExpr& e) {
  if (e.op == Op::kAnd) {
    Value a = eval(*e.left);
    return truthy(a) ? eval(*e.right) : a;
  }
  if (e.op == Op::kOr) {
    Value a = eval(*e.left);
    return truthy(a) ? a : eval(*e.right);
  }
  Value a = eval(*e.left);
  Value b = eval(*e.right);
  if (e.op == Op::kConcat) {
    std::string s = to_str(a);
    std::string t = to_str(b);
    charge_bytes(s.size() + t.size());
    return Value(s + t);
  }
  if (a.is_undefined()) throw_undefined(a);
  if (b.is_undefined()) throw_undefined(b);
  const char* sym = "+";
  switch (e.op) {
    case Op::kAdd:
      if (a.is_string() && b.is_string()) {
        charge_bytes(a.str().size() + b.str().size());
        return Value(a.str() + b.str());
      }
      if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
        size_t n = a.list()->items.size() + b.list()->items.size();
        if (n > max_items()) LOOM_THROW("template built a list too large ({} items)", n);
        charge(static_cast<int64_t>(n));
        std::vector<Value> items = a.list()->items;
        items.insert(items.end(), b.list()->items.begin(), b.list()->items.end());
        return make_list(std::move(items), a.is_tuple());
      }
      if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return Value(a.as_double() + b.as_double());
        return Value(checked(add_op, a.as_int(), b.as_int()));
      }
      break;
    case Op::kSub:
      sym = "-";
      if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return Value(a.as_double() - b.as_double());
        return Value(checked(sub_op, a.as_int(), b.as_int()));
      }
      break;
    case Op::kMul:
      sym = "*";
      if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return Value(a.as_double() * b.as_double());
        return Value(checked(mul_op, a.as_int(), b.as_int()));
      }
      if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(*this, a, b.as_int());
      if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(*this, b, a.as_int());
      break;
    case Op::kDiv:
      sym = "/";
      if (a.is_number() && b.is_number()) {
        if (b.as_double() == 0) LOOM_THROW("division by zero");
        return Value(a.as_double() / b.as_double());
      }
      break;
    case Op::kFloorDiv:
      sym = "//";
      if (a.is_number() && b.is_number()) {
        if (b.as_double() == 0) LOOM_THROW("integer division or modulo by zero");
        if (a.is_float() || b.is_float()) return Value(std::floor(a.as_double() / b.as_double()));
        int64_t x = a.as_int(), y = b.as_int();
        if (x == INT64_MIN && y == -1) LOOM_THROW("integer overflow");
        int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
        return Value(q);
      }
      break;
    case Op::kMod:
      sym = "%";
      if (a.is_string()) {
        std::vector<Value> args = b.is_tuple() ? b.list()->items : std::vector<Value>{b};
        return Value(percent_format(*this, a.str(), args));
      }
      if (a.is_number() && b.is_number()) {
        if (b.as_double() == 0) LOOM_THROW("integer division or modulo by zero");
        if (a.is_float() || b.is_float()) return Value(py_fmod(a.as_double(), b.as_double()));
        int64_t x = a.as_int(), y = b.as_int();
        if (y == -1) return Value(int64_t{0});
        int64_t m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value(m);
      }
      break;
    case Op::kPow:
      sym = "**";
      if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float() || b.as_int() < 0) {
          double x = a.as_double(), y = b.as_double();
          if (x == 0 && y < 0) LOOM_THROW("0.0 cannot be raised to a negative power");
          return Value(std::pow(x, y));
        }
        int64_t base = a.as_int(), exp = b.as_int(), r = 1;
        while (exp > 0) {
          if (exp & 1) r = checked(mul_op, r, base);
          exp >>= 1;
          if (exp > 0) base = checked(mul_op, base, base);
        }
        return Value(r);
      }
      break;
    default:
      break;
  }
  LOOM_THROW("unsupported operand type(s) for {}: '{}' and '{}'", sym, type_name(a), type_name(b));
}

Value Renderer::eval_compare(const CompareExpr& e) {
  Value left = eval(*e.first);
  for (const auto& [op, expr] : e.rest) {
    Value right = eval(*expr);
    bool r = false;
    switch (op) {
      case Op::kEq:
        r = equals(left, right);
        break;
      case Op::kNe:
        r = !equals(left, right);
        break;
      case Op::kLt:
      case Op::kLe:
      case Op::kGt:
      case Op::kGe:
        if (left.is_undefined()) throw_undefined(left);
        if (right.is_undefined()) throw_undefined(right);
        if (op == Op::kLt) r = less_than(left, right);
        else if (op == Op::kGt) r = less_than(right, left);
        else if (op == Op::kLe) r = !less_than(right, left);
        else r = !less_than(left, right);
        break;
      case Op::kIn:
      case Op::kNotIn: {
        if (right.is_string()) {
          if (!left.is_string())
            LOOM_THROW("'in <string>' requires string as left operand, not {}", type_name(left));
          r = right.str().find(left.str()) != std::string::npos;
        } else if (right.is_mapping()) {
          r = right.dict()->find(left) != nullptr;
        } else if (right.is_list()) {
          for (const Value& x : right.list()->items)
            if (equals(x, left)) {
              r = true;
              break;
            }
        } else if (right.is_undefined()) {
          r = false;
        } else {
          LOOM_THROW("argument of type '{}' is not iterable", type_name(right));
        }
        if (op == Op::kNotIn) r = !r;
        break;
      }
      default:
        break;
    }
    if (!r) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

std::vector<Value> bind_args(const CallArgs& args, std::initializer_list<const char*> names,
                             const char* fn_name) {
  std::vector<Value> out(names.size());
  if (args.positional.size() > names.size())
    LOOM_THROW("{}() takes at most {} arguments ({} given)", fn_name, names.size(),
               args.positional.size());
  for (size_t i = 0; i < args.positional.size(); ++i) out[i] = args.positional[i];
  for (const auto& [k, v] : args.keyword) {
    size_t i = 0;
    for (const char* n : names) {
      if (k == n) break;
      ++i;
    }
    if (i == names.size()) LOOM_THROW("{}() got an unexpected keyword argument '{}'", fn_name, k);
    out[i] = v;
  }
  return out;
}

}  // namespace loom::jinja
