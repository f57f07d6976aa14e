// load_tokenizer_hf: tokenizer.json (+ tokenizer_config.json,
// generation_config.json) into a BpeConfig. Files are untrusted: every field
// is type-checked and every id range-checked, and anything we cannot honour
// exactly (another model type, an unknown normaliser) is an error naming it.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/loader/bounded_json.h"
#include "model/loader/mapped_file.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/special_tokens.h"

namespace loom {

namespace {

using nlohmann::json;
using namespace tok;

constexpr size_t kMaxTokenizerJson = size_t{512} << 20;
constexpr size_t kMaxConfigJson = size_t{16} << 20;
constexpr int64_t kMaxId = int64_t{1} << 24;

struct Ctx {
  std::string label;  // file name for messages
};

const json& field(const json& obj, const char* key, const Ctx& c, const char* where) {
  if (!obj.is_object()) LOOM_THROW("{}: {} is not an object", c.label, where);
  auto it = obj.find(key);
  if (it == obj.end()) LOOM_THROW("{}: {} has no '{}'", c.label, where, key);
  return *it;
}

bool get_bool(const json& obj, const char* key, bool fallback, const Ctx& c) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) LOOM_THROW("{}: '{}' must be a boolean", c.label, key);
  return it->get<bool>();
}

std::string get_string(const json& obj, const char* key, const Ctx& c, const char* where) {
  const json& v = field(obj, key, c, where);
  if (!v.is_string()) LOOM_THROW("{}: {}.{} must be a string", c.label, where, key);
  return v.get<std::string>();
}

int32_t get_id(const json& v, const Ctx& c, const char* what) {
  if (!v.is_number_integer()) LOOM_THROW("{}: {} must be an integer", c.label, what);
  const int64_t id = v.get<int64_t>();
  if (id < 0 || id >= kMaxId) LOOM_THROW("{}: {} {} out of range", c.label, what, id);
  return static_cast<int32_t>(id);
}

// {"String": "x"} or {"Regex": "..."}.
void parse_pattern(const json& p, const Ctx& c, std::string& literal, std::shared_ptr<const Regex>& regex) {
  if (!p.is_object()) LOOM_THROW("{}: pattern must be an object", c.label);
  if (auto it = p.find("String"); it != p.end() && it->is_string()) {
    literal = it->get<std::string>();
  } else if (auto r = p.find("Regex"); r != p.end() && r->is_string()) {
    regex = std::make_shared<Regex>(r->get<std::string>());
  } else {
    LOOM_THROW("{}: pattern must have a String or Regex", c.label);
  }
}

void parse_normalizer(const json& n, const Ctx& c, std::vector<NormalizerStep>& out, int depth = 0) {
  if (n.is_null()) return;
  if (depth > 4) LOOM_THROW("{}: normalizers nest too deeply", c.label);
  const std::string type = get_string(n, "type", c, "normalizer");
  if (type == "Sequence") {
    const json& list = field(n, "normalizers", c, "normalizer");
    if (!list.is_array()) LOOM_THROW("{}: normalizer Sequence needs a list", c.label);
    for (const json& s : list) parse_normalizer(s, c, out, depth + 1);
  } else if (type == "NFC") {
    out.push_back({NormalizerStep::Kind::Nfc, {}, nullptr, {}});
  } else if (type == "Replace") {
    NormalizerStep s{NormalizerStep::Kind::Replace, {}, nullptr, get_string(n, "content", c, "Replace")};
    parse_pattern(field(n, "pattern", c, "Replace"), c, s.pattern, s.regex);
    out.push_back(std::move(s));
  } else if (type == "Prepend") {
    out.push_back({NormalizerStep::Kind::Prepend, {}, nullptr, get_string(n, "prepend", c, "Prepend")});
  } else {
    LOOM_THROW("{}: unsupported normalizer '{}'", c.label, type);
  }
}

PrependScheme parse_prepend_scheme(const json& p, const Ctx& c) {
  if (auto it = p.find("prepend_scheme"); it != p.end() && it->is_string()) {
    const std::string s = it->get<std::string>();
    if (s == "always") return PrependScheme::Always;
    if (s == "first") return PrependScheme::First;
    if (s == "never") return PrependScheme::Never;
    LOOM_THROW("{}: unknown Metaspace prepend_scheme '{}'", c.label, s);
  }
  return get_bool(p, "add_prefix_space", true, c) ? PrependScheme::Always : PrependScheme::Never;
}

void parse_pre_tokenizer(const json& p, const Ctx& c, std::vector<PreTokenizerStep>& out, int depth = 0) {
  if (p.is_null()) return;
  if (depth > 4) LOOM_THROW("{}: pre-tokenizers nest too deeply", c.label);
  const std::string type = get_string(p, "type", c, "pre_tokenizer");
  PreTokenizerStep s{};
  if (type == "Sequence") {
    const json& list = field(p, "pretokenizers", c, "pre_tokenizer");
    if (!list.is_array()) LOOM_THROW("{}: pre_tokenizer Sequence needs a list", c.label);
    for (const json& x : list) parse_pre_tokenizer(x, c, out, depth + 1);
    return;
  } else if (type == "Split") {
    s.kind = PreTokenizerStep::Kind::Split;
    parse_pattern(field(p, "pattern", c, "Split"), c, s.literal, s.regex);
    const std::string b = get_string(p, "behavior", c, "Split");
    if (b == "Isolated") s.behavior = SplitBehavior::Isolated;
    else if (b == "Removed") s.behavior = SplitBehavior::Removed;
    else if (b == "MergedWithPrevious") s.behavior = SplitBehavior::MergedWithPrevious;
    else if (b == "MergedWithNext") s.behavior = SplitBehavior::MergedWithNext;
    else if (b == "Contiguous") s.behavior = SplitBehavior::Contiguous;
    else LOOM_THROW("{}: unknown Split behavior '{}'", c.label, b);
    s.invert = get_bool(p, "invert", false, c);
  } else if (type == "ByteLevel") {
    s.kind = PreTokenizerStep::Kind::ByteLevel;
    s.add_prefix_space = get_bool(p, "add_prefix_space", true, c);
    s.use_regex = get_bool(p, "use_regex", true, c);
  } else if (type == "Metaspace") {
    s.kind = PreTokenizerStep::Kind::Metaspace;
    if (p.contains("replacement")) s.replacement = get_string(p, "replacement", c, "Metaspace");
    s.prepend_scheme = parse_prepend_scheme(p, c);
    s.split = get_bool(p, "split", true, c);
  } else if (type == "Digits") {
    s.kind = PreTokenizerStep::Kind::Digits;
    s.individual_digits = get_bool(p, "individual_digits", false, c);
  } else {
    LOOM_THROW("{}: unsupported pre_tokenizer '{}'", c.label, type);
  }
  out.push_back(std::move(s));
}

void parse_decoder(const json& d, const Ctx& c, DecoderSpec& out, int depth = 0) {
  if (d.is_null()) return;
  if (depth > 4) LOOM_THROW("{}: decoders nest too deeply", c.label);
  const std::string type = get_string(d, "type", c, "decoder");
  if (type == "Sequence") {
    const json& list = field(d, "decoders", c, "decoder");
    if (!list.is_array()) LOOM_THROW("{}: decoder Sequence needs a list", c.label);
    for (const json& x : list) parse_decoder(x, c, out, depth + 1);
  } else if (type == "ByteLevel") {
    out.byte_level = true;
  } else if (type == "Replace") {
    std::string literal;
    std::shared_ptr<const Regex> regex;
    parse_pattern(field(d, "pattern", c, "Replace"), c, literal, regex);
    if (regex) LOOM_THROW("{}: Replace decoder with a regex pattern is not supported", c.label);
    out.replacements.emplace_back(literal, get_string(d, "content", c, "Replace"));
  } else if (type == "ByteFallback") {
    out.byte_fallback = true;
  } else if (type == "Fuse") {
  } else if (type == "Strip") {
    const std::string content = get_string(d, "content", c, "Strip");
    const json& start = field(d, "start", c, "Strip");
    if (!start.is_number_integer() || start.get<int64_t>() < 0 || start.get<int64_t>() > 64)
      LOOM_THROW("{}: Strip.start must be a small integer", c.label);
    if (content != " ") LOOM_THROW("{}: Strip decoder of '{}' is not supported", c.label, content);
    out.strip_leading_spaces += static_cast<int>(start.get<int64_t>());
  } else if (type == "Metaspace") {
    std::string repl = "\xE2\x96\x81";
    if (d.contains("replacement")) repl = get_string(d, "replacement", c, "Metaspace");
    out.replacements.emplace_back(repl, " ");
    if (parse_prepend_scheme(d, c) != PrependScheme::Never) out.strip_leading_spaces += 1;
  } else {
    LOOM_THROW("{}: unsupported decoder '{}'", c.label, type);
  }
}

// Reads the special-token ids a TemplateProcessing post-processor puts around
// a single sequence: leading ones become bos, trailing ones eos.
void parse_post_processor(const json& p, const Ctx& c, const BpeConfig& cfg, std::optional<int32_t>& bos,
                          std::optional<int32_t>& eos, int depth = 0) {
  if (p.is_null() || !p.is_object() || depth > 4) return;
  const auto type_it = p.find("type");
  if (type_it == p.end() || !type_it->is_string()) return;
  const std::string type = type_it->get<std::string>();
  if (type == "Sequence") {
    if (auto it = p.find("processors"); it != p.end() && it->is_array())
      for (const json& x : *it) parse_post_processor(x, c, cfg, bos, eos, depth + 1);
    return;
  }
  if (type != "TemplateProcessing") return;
  auto single = p.find("single");
  auto specials = p.find("special_tokens");
  if (single == p.end() || !single->is_array() || specials == p.end() || !specials->is_object()) return;
  bool seen_sequence = false;
  for (const json& item : *single) {
    if (!item.is_object()) continue;
    if (item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    auto st = item.find("SpecialToken");
    if (st == item.end() || !st->is_object()) continue;
    auto name = st->find("id");
    if (name == st->end() || !name->is_string()) continue;
    auto def = specials->find(name->get<std::string>());
    if (def == specials->end() || !def->is_object()) continue;
    auto ids = def->find("ids");
    if (ids == def->end() || !ids->is_array() || ids->size() != 1) continue;
    const int32_t id = get_id((*ids)[0], c, "post_processor special token id");
    if (static_cast<size_t>(id) >= cfg.tokens.size()) LOOM_THROW("{}: post_processor id {} out of range", c.label, id);
    (seen_sequence ? eos : bos) = id;
  }
}

std::optional<int32_t> lookup(const BpeConfig& cfg, std::string_view text) {
  for (const AddedToken& a : cfg.added)
    if (a.content == text) return a.id;
  if (auto it = cfg.vocab.find(text); it != cfg.vocab.end()) return it->second;
  return std::nullopt;
}

// tokenizer_config.json's bos_token etc.: a string, an AddedToken dict or null.
std::optional<int32_t> config_token(const json& cfg_json, const char* key, const BpeConfig& cfg, const Ctx& c) {
  auto it = cfg_json.find(key);
  if (it == cfg_json.end() || it->is_null()) return std::nullopt;
  std::string text;
  if (it->is_string()) {
    text = it->get<std::string>();
  } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    text = (*it)["content"].get<std::string>();
  } else {
    LOOM_THROW("{}: '{}' must be a string or an object with 'content'", c.label, key);
  }
  auto id = lookup(cfg, text);
  if (!id) LOOM_THROW("{}: {} '{}' is not in the vocabulary", c.label, key, text);
  return id;
}

void parse_model(const json& m, const Ctx& c, BpeConfig& cfg) {
  if (!m.is_object()) LOOM_THROW("{}: 'model' must be an object", c.label);
  if (auto t = m.find("type"); t != m.end()) {
    if (!t->is_string() || t->get<std::string>() != "BPE")
      LOOM_THROW("{}: unsupported model type {} (only BPE)", c.label, t->dump());
  } else if (!m.contains("merges")) {
    LOOM_THROW("{}: model has neither a type nor merges", c.label);
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = m.find(key);
    if (it != m.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()))
      LOOM_THROW("{}: BPE '{}' is not supported", c.label, key);
  }
  cfg.byte_fallback = get_bool(m, "byte_fallback", false, c);
  cfg.fuse_unk = get_bool(m, "fuse_unk", false, c);
  cfg.ignore_merges = get_bool(m, "ignore_merges", false, c);

  const json& vocab = field(m, "vocab", c, "model");
  if (!vocab.is_object()) LOOM_THROW("{}: model.vocab must be an object", c.label);
  int64_t max_id = -1;
  cfg.vocab.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int32_t id = get_id(it.value(), c, "vocab id");
    max_id = std::max<int64_t>(max_id, id);
    cfg.vocab.emplace(it.key(), id);
  }
  for (const AddedToken& a : cfg.added) max_id = std::max<int64_t>(max_id, a.id);
  if (max_id < 0) LOOM_THROW("{}: empty vocabulary", c.label);
  cfg.tokens.assign(static_cast<size_t>(max_id) + 1, std::string());
  std::vector<uint8_t> seen(cfg.tokens.size(), 0);
  for (const auto& [text, id] : cfg.vocab) {
    if (seen[id]) LOOM_THROW("{}: vocab id {} is used twice", c.label, id);
    seen[id] = 1;
    cfg.tokens[id] = text;
  }

  const json& merges = field(m, "merges", c, "model");
  if (!merges.is_array()) LOOM_THROW("{}: model.merges must be a list", c.label);
  cfg.merges.reserve(merges.size());
  auto id_of = [&](const std::string& s, size_t i) {
    auto it = cfg.vocab.find(s);
    if (it == cfg.vocab.end()) LOOM_THROW("{}: merge #{} uses '{}', which is not in the vocabulary", c.label, i, s);
    return it->second;
  };
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& e = merges[i];
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        LOOM_THROW("{}: merge #{} '{}' is not two tokens separated by a space", c.label, i, s);
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      LOOM_THROW("{}: merge #{} must be \"a b\" or [a, b]", c.label, i);
    }
    cfg.merges.emplace_back(id_of(a, i), id_of(b, i));
  }

  if (auto u = m.find("unk_token"); u != m.end() && !u->is_null()) {
    if (!u->is_string()) LOOM_THROW("{}: model.unk_token must be a string", c.label);
    auto it = cfg.vocab.find(u->get<std::string>());
    if (it == cfg.vocab.end()) LOOM_THROW("{}: unk_token '{}' is not in the vocabulary", c.label, u->get<std::string>());
    cfg.unk_id = it->second;
  }
}

std::optional<json> read_optional_json(const std::filesystem::path& path, int depth) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  const std::string text = read_small_file(path.string(), kMaxConfigJson);
  return parse_bounded_json(text, path.filename().string(), JsonLimits{depth, size_t{1} << 20});
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_hf(const std::string& model_dir) {
  const std::filesystem::path dir(model_dir);
  const std::filesystem::path tj_path = dir / "tokenizer.json";
  Ctx c{"tokenizer.json"};
  std::error_code ec;
  if (!std::filesystem::exists(tj_path, ec)) LOOM_THROW("{}: no tokenizer.json in this directory", model_dir);
  const std::string text = read_small_file(tj_path.string(), kMaxTokenizerJson);
  const json tj = parse_bounded_json(text, c.label, JsonLimits{16, size_t{1} << 26});
  if (!tj.is_object()) LOOM_THROW("tokenizer.json: top level must be an object");

  BpeConfig cfg;
  if (auto it = tj.find("added_tokens"); it != tj.end() && !it->is_null()) {
    if (!it->is_array()) LOOM_THROW("tokenizer.json: added_tokens must be a list");
    for (const json& a : *it) {
      AddedToken t;
      t.id = get_id(field(a, "id", c, "added token"), c, "added token id");
      t.content = get_string(a, "content", c, "added token");
      if (t.content.empty()) LOOM_THROW("tokenizer.json: added token {} has empty content", t.id);
      t.special = get_bool(a, "special", false, c);
      t.normalized = get_bool(a, "normalized", !t.special, c);
      t.lstrip = get_bool(a, "lstrip", false, c);
      t.rstrip = get_bool(a, "rstrip", false, c);
      t.single_word = get_bool(a, "single_word", false, c);
      cfg.added.push_back(std::move(t));
    }
  }
  parse_model(field(tj, "model", c, "top level"), c, cfg);
  if (auto it = tj.find("normalizer"); it != tj.end()) parse_normalizer(*it, c, cfg.normalizers);
  if (auto it = tj.find("pre_tokenizer"); it != tj.end()) parse_pre_tokenizer(*it, c, cfg.pre_tokenizers);
  if (auto it = tj.find("decoder"); it != tj.end()) parse_decoder(*it, c, cfg.decoder);
  for (const auto& s : cfg.pre_tokenizers)
    if (s.kind == PreTokenizerStep::Kind::ByteLevel) cfg.byte_level = true;
  if (cfg.byte_level && !cfg.decoder.byte_level)
    LOOM_THROW("tokenizer.json: a ByteLevel pre-tokenizer needs a ByteLevel decoder");

  // Special tokens: the post-processor says what encode(add_special) adds;
  // tokenizer_config.json names bos/eos and may override add_bos/add_eos.
  std::optional<int32_t> pp_bos, pp_eos;
  if (auto it = tj.find("post_processor"); it != tj.end()) parse_post_processor(*it, c, cfg, pp_bos, pp_eos);
  SpecialTokens& sp = cfg.special;
  sp.unk = cfg.unk_id;
  sp.bos = pp_bos;
  sp.eos = pp_eos;
  sp.add_bos = pp_bos.has_value();
  sp.add_eos = pp_eos.has_value();
  if (auto tc = read_optional_json(dir / "tokenizer_config.json", 8)) {
    Ctx cc{"tokenizer_config.json"};
    if (!tc->is_object()) LOOM_THROW("tokenizer_config.json: top level must be an object");
    if (auto id = config_token(*tc, "bos_token", cfg, cc)) sp.bos = id;
    if (auto id = config_token(*tc, "eos_token", cfg, cc)) sp.eos = id;
    if (auto id = config_token(*tc, "pad_token", cfg, cc)) sp.pad = id;
    if (auto id = config_token(*tc, "unk_token", cfg, cc)) sp.unk = id;
    sp.add_bos = get_bool(*tc, "add_bos_token", sp.add_bos, cc) && sp.bos.has_value();
    sp.add_eos = get_bool(*tc, "add_eos_token", sp.add_eos, cc) && sp.eos.has_value();
  }
  std::vector<int32_t> gen_eos;
  if (auto gc = read_optional_json(dir / "generation_config.json", 8)) {
    Ctx gcc{"generation_config.json"};
    if (gc->is_object()) {
      if (auto it = gc->find("eos_token_id"); it != gc->end() && !it->is_null()) {
        if (it->is_array()) {
          for (const json& v : *it) gen_eos.push_back(get_id(v, gcc, "eos_token_id"));
        } else {
          gen_eos.push_back(get_id(*it, gcc, "eos_token_id"));
        }
        for (int32_t id : gen_eos)
          if (static_cast<size_t>(id) >= cfg.tokens.size())
            LOOM_THROW("generation_config.json: eos_token_id {} is outside the vocabulary ({} tokens)", id,
                       cfg.tokens.size());
        if (!sp.eos && !gen_eos.empty()) sp.eos = gen_eos.front();
      }
      if (auto it = gc->find("bos_token_id"); it != gc->end() && !it->is_null() && !sp.bos)
        sp.bos = get_id(*it, gcc, "bos_token_id");
    }
  }
  collect_eos_ids(cfg, gen_eos);
  return std::make_unique<BpeTokenizer>(std::move(cfg));
}

}  // namespace loom
