// PCRE2 (UTF + Unicode properties, JIT when available) for pre-tokeniser
// patterns, and the patterns of the pre-tokenisers known by name in GGUF files.
// A compiled Regex is immutable and safe to use from several threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace loom::tok {

class Regex {
 public:
  // Throws loom::Error naming the pattern and PCRE2's message when it does not compile.
  explicit Regex(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Non-overlapping matches [begin, end) in byte offsets, left to right; empty
  // matches are skipped. text must be valid UTF-8.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

// Regex patterns known for the byte-level pre-tokenisers.
extern const char* const kGpt2Pattern;
extern const char* const kLlama3Pattern;
extern const char* const kQwen2Pattern;

// The sequence of isolating split patterns for a GGUF `tokenizer.ggml.pre`
// name; throws loom::Error for a name we do not know.
std::vector<std::string> gguf_pre_tokenizer_patterns(std::string_view pre);

}  // namespace loom::tok
