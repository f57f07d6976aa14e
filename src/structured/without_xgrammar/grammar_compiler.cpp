// GrammarCompiler in a build without xgrammar's source (scripts/setup.sh
// fetches it): every compile is refused, so no request is ever served
// unconstrained.
#include "structured/grammar_compiler.h"

namespace loom::structured {

struct GrammarCompiler::Impl {};

GrammarCompiler::GrammarCompiler(const Tokenizer&, int32_t, CompilerOptions) {}
GrammarCompiler::~GrammarCompiler() = default;

bool GrammarCompiler::available() {
  return false;
}

CompilerStats GrammarCompiler::stats() const {
  return {};
}

std::shared_ptr<const TokenConstraintFactory> GrammarCompiler::compile(const GrammarSpec&) {
  throw GrammarError(GrammarError::Kind::Unavailable,
                     "structured output is not available: this build of loom has no grammar "
                     "engine (scripts/setup.sh fetches xgrammar)");
}

}  // namespace loom::structured
