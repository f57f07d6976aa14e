// load_tokenizer_gguf: tokenizer.ggml.* metadata into a BpeConfig, built the
// way HF transformers builds a tokenizer from a GGUF file (so ids match it):
// "gpt2" -> byte-level BPE with the pre-tokeniser named by tokenizer.ggml.pre;
// "llama" -> SentencePiece-style BPE with byte fallback, merges implied by the
// token scores (by file order for Gemma, whose scores do not follow merges).
// Control tokens become special added tokens, user-defined ones plain added
// tokens. Metadata is untrusted: counts, ids and types are all checked.
#include <fmt/format.h>

#include "core/error.h"
#include "model/loader/gguf.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/unicode.h"

namespace loom {

namespace {

using namespace tok;

constexpr size_t kMaxVocab = size_t{1} << 24;
constexpr const char* kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

enum TokenType : int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

std::optional<int32_t> optional_id(const GgufFile& g, const char* key, size_t n) {
  const GgufValue* v = g.find(key);
  if (v == nullptr) return std::nullopt;
  const int64_t id = v->as_int();
  if (id < 0 || static_cast<size_t>(id) >= n) {
    // llama.cpp writes -1 (or out-of-range) for "none"; treat negative as absent.
    if (id < 0) return std::nullopt;
    LOOM_THROW("GGUF {}: id {} out of range (vocabulary of {})", key, id, n);
  }
  return static_cast<int32_t>(id);
}

bool all_byte_level(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const Utf8Step st = utf8_step(s, i);
    if (!st.valid || byte_level_byte(st.cp) < 0) return false;
    i += st.len;
  }
  return true;
}

// Python's str.strip() would leave nothing: the token is all whitespace.
bool all_whitespace(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const Utf8Step st = utf8_step(s, i);
    if (!is_unicode_whitespace(st.cp) && !(st.cp >= 0x1C && st.cp <= 0x1F)) return false;
    i += st.len;
  }
  return true;
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_gguf(const GgufFile& g) {
  const std::string model = g.get_string("tokenizer.ggml.model");
  if (model.empty()) LOOM_THROW("GGUF has no tokenizer (tokenizer.ggml.model missing)");
  const bool byte_level = model == "gpt2";
  if (!byte_level && model != "llama")
    LOOM_THROW("GGUF tokenizer.ggml.model '{}' is not supported (gpt2 and llama are)", model);
  const std::string arch = g.get_string("general.architecture");

  BpeConfig cfg;
  std::vector<std::string> raw = g.get_string_array("tokenizer.ggml.tokens");
  const size_t n = raw.size();
  if (n == 0) LOOM_THROW("GGUF tokenizer.ggml.tokens is missing or empty");
  if (n > kMaxVocab) LOOM_THROW("GGUF vocabulary of {} tokens exceeds the limit {}", n, kMaxVocab);
  std::vector<int64_t> types;
  if (g.find("tokenizer.ggml.token_type") != nullptr) {
    types = g.get_int_array("tokenizer.ggml.token_type");
    if (types.size() != n) LOOM_THROW("GGUF has {} token types for {} tokens", types.size(), n);
  } else {
    types.assign(n, kNormal);
  }
  for (size_t i = 0; i < n; ++i)
    if (!utf8_is_valid(raw[i])) LOOM_THROW("GGUF token {} is not valid UTF-8", i);

  // Vocabulary text as the model's merges see it.
  cfg.tokens.resize(n);
  const bool gemma = arch.rfind("gemma", 0) == 0;
  for (size_t i = 0; i < n; ++i) {
    std::string t = raw[i];
    if (byte_level && !all_byte_level(t)) {
      std::string spelled;
      for (unsigned char b : t) spelled += byte_level_chars()[b];
      t = std::move(spelled);
    } else if (!byte_level && gemma && t.find(' ') != std::string::npos && all_whitespace(t)) {
      // Gemma files store runs of spaces as real spaces; the model sees U+2581.
      std::string spelled;
      for (size_t k = 0, len = utf8_length(t); k < len; ++k) spelled += kSpace;
      t = std::move(spelled);
    }
    cfg.tokens[i] = t;
    cfg.vocab.emplace(std::move(t), static_cast<int32_t>(i));  // first id wins on duplicates
  }

  // Added tokens: control ones are special, user-defined ones plain.
  for (size_t i = 0; i < n; ++i) {
    if (types[i] == kControl && (!byte_level || all_byte_level(raw[i])) && !raw[i].empty()) {
      AddedToken a;
      a.id = static_cast<int32_t>(i);
      a.content = raw[i];
      a.special = true;
      cfg.added.push_back(std::move(a));
    } else if (types[i] == kUserDefined && cfg.vocab.count(raw[i]) != 0 && !raw[i].empty()) {
      AddedToken a;
      a.id = cfg.vocab.find(raw[i])->second;
      a.content = raw[i];
      cfg.added.push_back(std::move(a));
    }
  }

  SpecialTokens& sp = cfg.special;
  sp.bos = optional_id(g, "tokenizer.ggml.bos_token_id", n);
  sp.eos = optional_id(g, "tokenizer.ggml.eos_token_id", n);
  sp.unk = optional_id(g, "tokenizer.ggml.unknown_token_id", n);
  sp.pad = optional_id(g, "tokenizer.ggml.padding_token_id", n);
  sp.add_bos = g.get_bool("tokenizer.ggml.add_bos_token", !byte_level) && sp.bos.has_value();
  sp.add_eos = g.get_bool("tokenizer.ggml.add_eos_token", false) && sp.eos.has_value();
  std::vector<int32_t> extra_eos;
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (auto id = optional_id(g, key, n)) extra_eos.push_back(*id);

  if (byte_level) {
    cfg.byte_level = true;
    const std::vector<std::string> merges = g.get_string_array("tokenizer.ggml.merges");
    if (merges.empty()) LOOM_THROW("GGUF byte-level tokenizer has no tokenizer.ggml.merges");
    cfg.merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const std::string& m = merges[i];
      const size_t sp_pos = m.find(' ', 1);
      if (sp_pos == std::string::npos) LOOM_THROW("GGUF merge #{} '{}' has no space", i, m);
      auto a = cfg.vocab.find(std::string_view(m).substr(0, sp_pos));
      auto b = cfg.vocab.find(std::string_view(m).substr(sp_pos + 1));
      if (a == cfg.vocab.end() || b == cfg.vocab.end())
        LOOM_THROW("GGUF merge #{} '{}' uses a token missing from the vocabulary", i, m);
      cfg.merges.emplace_back(a->second, b->second);
    }
    const std::string pre = g.get_string("tokenizer.ggml.pre", "default");
    for (const std::string& pattern : gguf_pre_tokenizer_patterns(pre)) {
      PreTokenizerStep s{};
      s.kind = PreTokenizerStep::Kind::Split;
      s.regex = std::make_shared<Regex>(pattern);
      s.behavior = SplitBehavior::Isolated;
      cfg.pre_tokenizers.push_back(std::move(s));
    }
    PreTokenizerStep bl{};
    bl.kind = PreTokenizerStep::Kind::ByteLevel;
    bl.add_prefix_space = false;
    bl.use_regex = false;
    cfg.pre_tokenizers.push_back(std::move(bl));
    cfg.decoder.byte_level = true;
  } else {
    cfg.byte_fallback = true;
    cfg.fuse_unk = true;
    cfg.unk_id = sp.unk;
    if (g.find("tokenizer.ggml.merges") != nullptr) {
      const std::vector<std::string> merges = g.get_string_array("tokenizer.ggml.merges");
      for (size_t i = 0; i < merges.size(); ++i) {
        const std::string& m = merges[i];
        const size_t sp_pos = m.find(' ', 1);
        if (sp_pos == std::string::npos) LOOM_THROW("GGUF merge #{} '{}' has no space", i, m);
        auto a = cfg.vocab.find(std::string_view(m).substr(0, sp_pos));
        auto b = cfg.vocab.find(std::string_view(m).substr(sp_pos + 1));
        if (a == cfg.vocab.end() || b == cfg.vocab.end())
          LOOM_THROW("GGUF merge #{} '{}' uses a token missing from the vocabulary", i, m);
        cfg.merges.emplace_back(a->second, b->second);
      }
    } else {
      cfg.use_scores = true;
      if (gemma) {
        // Gemma's scores do not follow its merge order; the file order does.
        cfg.scores.resize(n);
        for (size_t i = 0; i < n; ++i) cfg.scores[i] = -static_cast<float>(i);
      } else {
        const std::vector<double> scores = g.get_float_array("tokenizer.ggml.scores");
        if (scores.size() != n) LOOM_THROW("GGUF has {} token scores for {} tokens", scores.size(), n);
        cfg.scores.assign(scores.begin(), scores.end());
      }
    }
    const bool prefix = g.get_bool("tokenizer.ggml.add_space_prefix", !gemma);
    PreTokenizerStep ms{};
    ms.kind = PreTokenizerStep::Kind::Metaspace;
    ms.prepend_scheme = prefix ? PrependScheme::First : PrependScheme::Never;
    ms.split = false;
    cfg.pre_tokenizers.push_back(std::move(ms));
    cfg.decoder.replacements.emplace_back(kSpace, " ");
    cfg.decoder.byte_fallback = true;
    cfg.decoder.strip_leading_spaces = prefix ? 1 : 0;
  }
  collect_eos_ids(cfg, extra_eos);
  return std::make_unique<BpeTokenizer>(std::move(cfg));
}

}  // namespace loom
