// PCRE2 wrapper and named pre-tokeniser patterns.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "core/error.h"

namespace loom::tok {

// GPT-2's pattern (what ByteLevel(use_regex=true) applies).
const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama 3 (also GPT-4's cl100k): case-insensitive contractions, numbers of 1-3 digits.
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2: as Llama 3 but every digit on its own.
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {
const char* const kGpt2NoTrailingPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
}  // namespace

Regex::Regex(std::string_view pattern) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    LOOM_THROW("tokenizer: bad regex at offset {}: {} (pattern: {})", err_offset,
               reinterpret_cast<const char*>(msg), pattern_);
  }
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  if (md == nullptr) LOOM_THROW("tokenizer: out of memory creating regex match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    // The caller guarantees valid UTF-8, so skip PCRE2's check on every call.
    const int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), pos, 0, md, nullptr)
                        : pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      LOOM_THROW("tokenizer: regex match failed: {}", reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.emplace_back(b, e);
      pos = e;
    } else {
      // Empty match: step over one character.
      if (b >= text.size()) break;
      size_t n = 1;
      while (b + n < text.size() && (static_cast<unsigned char>(text[b + n]) & 0xC0) == 0x80) ++n;
      pos = b + n;
    }
  }
  pcre2_match_data_free(md);
  return out;
}

std::vector<std::string> gguf_pre_tokenizer_patterns(std::string_view pre) {
  // Names as llama.cpp's converter writes them.
  if (pre == "default" || pre == "gpt-2" || pre == "gpt2" || pre == "phi-2" || pre == "jina-es" ||
      pre == "jina-de" || pre == "jina-v2-es" || pre == "jina-v2-de" || pre == "roberta-bpe" ||
      pre == "poro-chat" || pre == "viking" || pre == "gpt3-finnish" || pre == "olmo")
    return {kGpt2Pattern};
  if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "smaug-bpe" ||
      pre == "falcon3" || pre == "pixtral" || pre == "dbrx" || pre == "falcon-h1" || pre == "lfm2" ||
      pre == "midm-2.0")
    return {kLlama3Pattern};
  if (pre == "qwen2" || pre == "deepseek-r1-qwen" || pre == "megrez" || pre == "kormo")
    return {kQwen2Pattern};
  // StarCoder-family vocabularies: digits one by one, then GPT-2's pattern
  // without its final catch-all `\s+`.
  if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "command-r" ||
      pre == "codeshell" || pre == "exaone" || pre == "minerva-7b")
    return {R"(\p{N})", kGpt2NoTrailingPattern};
  if (pre == "deepseek-llm")
    return {R"([\r\n])",
            R"(\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+)",
            R"(\s?[!-/:-~！-／：-～‘-‟　-。]+)", R"(\s+$)", R"([一-龥ࠀ-一가-퟿]+)", R"(\p{N}+)"};
  if (pre == "deepseek-coder")
    return {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", R"([一-龥ࠀ-一가-퟿]+)", R"(\p{N})"};
  LOOM_THROW("tokenizer: unknown GGUF pre-tokenizer '{}' (tokenizer.ggml.pre); known: default, gpt-2, "
             "llama-bpe, qwen2, smollm, deepseek-llm, deepseek-coder and their aliases",
             pre);
}

}  // namespace loom::tok
