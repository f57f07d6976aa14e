// GrammarCompiler: GrammarSpecs -> TokenConstraintFactory over one model's
// vocabulary (built once from loom's Tokenizer: each token's bytes, special
// tokens never allowed, the eos ids end the output). Compiles run on the
// compiler's own small pool, never on the engine thread; compile() waits at
// most `max_compile_time` and throws GrammarError::Timeout past it. The
// grammar engine cannot be interrupted, so an over-time compile finishes in
// the background (its result then goes to the cache); the pool size and a
// bounded queue (GrammarError::Busy past it) cap the CPU such compiles take.
// Compiled grammars are cached by (spec, this compiler's vocabulary), LRU
// within `cache_bytes`. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "engine/token_constraint.h"
#include "structured/grammar_spec.h"

namespace loom {
class Tokenizer;
}

namespace loom::structured {

struct CompilerOptions {
  std::chrono::milliseconds max_compile_time{2000};
  int32_t threads = 2;      // compile pool (and per-compile parallelism)
  int32_t max_queued = 64;  // compiles waiting or running, at most
  int64_t cache_bytes = int64_t(256) << 20;
};

struct CompilerStats {
  int64_t compiles = 0;  // finished compiles (cache misses)
  int64_t cache_hits = 0;
  int64_t timeouts = 0;     // requests refused at the compile deadline
  int64_t interrupted = 0;  // compiles stopped at their deadline (their pool thread freed)
  int64_t failures = 0;     // invalid or unsupported specs
  int64_t cache_bytes = 0;
};

class GrammarCompiler {
 public:
  // vocab_size: the model's logits width (>= the tokenizer's; ids past the
  // tokenizer's are never allowed). The tokenizer must outlive the compiler.
  GrammarCompiler(const Tokenizer& tokenizer, int32_t vocab_size, CompilerOptions options = {});
  ~GrammarCompiler();
  GrammarCompiler(const GrammarCompiler&) = delete;
  GrammarCompiler& operator=(const GrammarCompiler&) = delete;

  // A factory of constraints for `spec` (cached). Any thread but the engine's;
  // throws GrammarError.
  std::shared_ptr<const TokenConstraintFactory> compile(const GrammarSpec& spec);

  CompilerStats stats() const;
  // False when this build has no grammar engine (compile() then throws
  // GrammarError::Unavailable).
  static bool available();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::structured
