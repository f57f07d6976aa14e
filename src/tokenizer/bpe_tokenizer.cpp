// BpeTokenizer: added-token splitting, normalisation, pre-tokenisation, the
// BPE merge loop and decoding. The merge loop follows HF tokenizers' order
// exactly (lowest rank first, leftmost on ties, stale queue entries skipped
// when the pair no longer yields the same token) so ids match HF.
#include "tokenizer/bpe_tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <queue>

#include "core/error.h"
#include "tokenizer/normalize.h"
#include "tokenizer/unicode.h"

namespace loom::tok {

namespace {

constexpr size_t kMaxVocab = size_t{1} << 24;

bool is_word_char(uint32_t cp) {
  if (cp < 0x80) return std::isalnum(static_cast<int>(cp)) != 0 || cp == '_';
  return !is_unicode_whitespace(cp);  // approximation of char::is_alphanumeric
}

uint32_t last_char(std::string_view s) {
  if (s.empty()) return 0;
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return utf8_step(s, i).cp;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  if (pos == 0) return;
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

// (begin, end, is_match) pieces covering [0, n) given sorted non-overlapping matches.
struct Span {
  size_t begin, end;
  bool is_match;
};

std::vector<Span> apply_behavior(const std::vector<std::pair<size_t, size_t>>& matches, size_t n,
                                 SplitBehavior behavior, bool invert) {
  std::vector<Span> spans;
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (b > prev) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < n) spans.push_back({prev, n, invert});

  std::vector<Span> out;
  switch (behavior) {
    case SplitBehavior::Isolated:
      return spans;
    case SplitBehavior::Removed:
      for (const Span& s : spans)
        if (!s.is_match) out.push_back(s);
      return out;
    case SplitBehavior::MergedWithPrevious: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !out.empty())
          out.back().end = s.end;
        else
          out.push_back(s);
        previous_match = s.is_match;
      }
      return out;
    }
    case SplitBehavior::MergedWithNext: {
      bool previous_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty())
          out.back().begin = it->begin;
        else
          out.push_back(*it);
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      return out;
    }
    case SplitBehavior::Contiguous: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !out.empty())
          out.back().end = s.end;
        else
          out.push_back(s);
        previous_match = s.is_match;
      }
      return out;
    }
  }
  return spans;
}

std::vector<std::pair<size_t, size_t>> find_literal(std::string_view text, std::string_view lit) {
  std::vector<std::pair<size_t, size_t>> out;
  if (lit.empty()) return out;
  for (size_t pos = 0, hit; (hit = text.find(lit, pos)) != std::string_view::npos; pos = hit + lit.size())
    out.emplace_back(hit, hit + lit.size());
  return out;
}

}  // namespace

// Longest-match splitter over a set of added tokens (a byte trie). Matching is
// leftmost-longest, as HF's Aho-Corasick split does.
class BpeTokenizer::AddedMatcher {
 public:
  struct Segment {
    size_t begin, end;
    int32_t id;  // -1: plain text
  };

  void add(std::string_view content, const AddedToken& token) {
    if (content.empty()) return;
    uint32_t node = 0;
    for (unsigned char c : content) {
      auto& next = nodes_[node].next;
      auto it = std::lower_bound(next.begin(), next.end(), c,
                                 [](const auto& p, unsigned char v) { return p.first < v; });
      if (it != next.end() && it->first == c) {
        node = it->second;
      } else {
        const auto child = static_cast<uint32_t>(nodes_.size());
        next.insert(it, {c, child});
        nodes_.emplace_back();
        node = child;
      }
    }
    if (nodes_[node].token < 0) {
      nodes_[node].token = static_cast<int32_t>(tokens_.size());
      tokens_.push_back(token);
    }
    first_byte_[static_cast<unsigned char>(content[0])] = true;
  }
  bool empty() const { return tokens_.empty(); }

  std::vector<Segment> split(std::string_view text) const {
    std::vector<Segment> out;
    size_t text_start = 0, pos = 0;
    while (pos < text.size()) {
      if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
        ++pos;
        continue;
      }
      uint32_t node = 0;
      int32_t found = -1;
      size_t found_len = 0;
      for (size_t i = pos; i < text.size(); ++i) {
        const auto& next = nodes_[node].next;
        const auto c = static_cast<unsigned char>(text[i]);
        auto it = std::lower_bound(next.begin(), next.end(), c,
                                   [](const auto& p, unsigned char v) { return p.first < v; });
        if (it == next.end() || it->first != c) break;
        node = it->second;
        if (nodes_[node].token >= 0) {
          found = nodes_[node].token;
          found_len = i + 1 - pos;
        }
      }
      if (found < 0) {
        ++pos;
        continue;
      }
      const AddedToken& tok = tokens_[found];
      size_t begin = pos, end = pos + found_len;
      if (tok.single_word) {
        const bool start_ok = begin == 0 || !is_word_char(last_char(text.substr(0, begin)));
        const bool end_ok = end == text.size() || !is_word_char(utf8_step(text, end).cp);
        if (!start_ok || !end_ok) {
          pos = end;
          continue;
        }
      }
      if (tok.lstrip) {
        while (begin > text_start) {
          size_t i = begin - 1;
          while (i > text_start && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
          if (!is_unicode_whitespace(utf8_step(text, i).cp)) break;
          begin = i;
        }
      }
      if (tok.rstrip) {
        while (end < text.size()) {
          const Utf8Step st = utf8_step(text, end);
          if (!is_unicode_whitespace(st.cp)) break;
          end += st.len;
        }
      }
      if (begin > text_start) out.push_back({text_start, begin, -1});
      out.push_back({begin, end, tok.id});
      text_start = pos = end;
    }
    if (text_start < text.size()) out.push_back({text_start, text.size(), -1});
    return out;
  }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, uint32_t>> next;  // sorted by byte
    int32_t token = -1;
  };
  std::vector<Node> nodes_{1};
  std::vector<AddedToken> tokens_;
  bool first_byte_[256] = {};
};

BpeTokenizer::BpeTokenizer(BpeConfig config) : cfg_(std::move(config)) {
  const size_t n = cfg_.tokens.size();
  if (n == 0) LOOM_THROW("tokenizer: empty vocabulary");
  if (n > kMaxVocab) LOOM_THROW("tokenizer: vocabulary of {} tokens exceeds the limit {}", n, kMaxVocab);
  auto check_id = [n](int64_t id, std::string_view what) {
    if (id < 0 || static_cast<size_t>(id) >= n)
      LOOM_THROW("tokenizer: {} id {} out of range [0, {})", what, id, n);
  };
  for (const auto& [text, id] : cfg_.vocab) check_id(id, "vocab");
  for (const AddedToken& a : cfg_.added) {
    check_id(a.id, "added token");
    if (a.content.empty()) LOOM_THROW("tokenizer: added token {} has empty content", a.id);
  }
  if (cfg_.unk_id) check_id(*cfg_.unk_id, "unk");
  for (auto* opt : {&cfg_.special.bos, &cfg_.special.eos, &cfg_.special.pad, &cfg_.special.unk})
    if (*opt) check_id(**opt, "special token");
  for (int32_t id : cfg_.special.eos_ids) check_id(id, "eos");

  if (cfg_.use_scores) {
    if (cfg_.scores.size() != n)
      LOOM_THROW("tokenizer: {} scores for {} tokens", cfg_.scores.size(), n);
    // Dense rank of each token's score, highest first (equal scores share a rank).
    std::vector<int32_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = static_cast<int32_t>(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return cfg_.scores[a] > cfg_.scores[b]; });
    score_rank_.assign(n, 0);
    uint32_t rank = 0;
    for (size_t i = 0; i < n; ++i) {
      if (i > 0 && cfg_.scores[order[i]] != cfg_.scores[order[i - 1]]) ++rank;
      score_rank_[order[i]] = rank;
    }
    token_chars_.resize(n);
    for (size_t i = 0; i < n; ++i)
      token_chars_[i] = static_cast<uint32_t>(std::min<size_t>(utf8_length(cfg_.tokens[i]), 255));
  } else {
    merge_table_.reserve(cfg_.merges.size());
    for (size_t r = 0; r < cfg_.merges.size(); ++r) {
      const auto [a, b] = cfg_.merges[r];
      check_id(a, "merge");
      check_id(b, "merge");
      const std::string merged = cfg_.tokens[a] + cfg_.tokens[b];
      auto it = cfg_.vocab.find(merged);
      if (it == cfg_.vocab.end())
        LOOM_THROW("tokenizer: merge #{} ('{}' '{}') produces a token missing from the vocabulary", r,
                   cfg_.tokens[a], cfg_.tokens[b]);
      const uint64_t key = (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b);
      merge_table_.insert_or_assign(key, MergeResult{r, it->second});
    }
  }

  special_flags_.assign(n, 0);
  for (const AddedToken& a : cfg_.added) {
    if (a.special) special_flags_[a.id] = 1;
    cfg_.tokens[a.id] = a.content;
    added_by_content_.emplace(a.content, a.id);
  }

  const auto& chars = byte_level_chars();
  for (int b = 0; b < 256; ++b) {
    auto it = cfg_.vocab.find(chars[b]);
    byte_ids_[b] = it == cfg_.vocab.end() ? -1 : it->second;
    it = cfg_.vocab.find(fmt::format("<0x{:02X}>", b));
    byte_fallback_ids_[b] = it == cfg_.vocab.end() ? -1 : it->second;
  }

  raw_matcher_ = std::make_unique<AddedMatcher>();
  raw_matcher_nospecial_ = std::make_unique<AddedMatcher>();
  norm_matcher_ = std::make_unique<AddedMatcher>();
  norm_matcher_nospecial_ = std::make_unique<AddedMatcher>();
  for (const AddedToken& a : cfg_.added) {
    if (a.normalized) {
      const std::string content = normalize(a.content);
      norm_matcher_->add(content, a);
      if (!a.special) norm_matcher_nospecial_->add(content, a);
    } else {
      raw_matcher_->add(a.content, a);
      if (!a.special) raw_matcher_nospecial_->add(a.content, a);
    }
  }
  for (const auto& step : cfg_.pre_tokenizers)
    if (step.kind == PreTokenizerStep::Kind::ByteLevel && step.use_regex && !gpt2_regex_)
      gpt2_regex_ = std::make_shared<Regex>(kGpt2Pattern);

  special_ = cfg_.special;
  strip_leading_spaces_ = cfg_.decoder.strip_leading_spaces;
}

BpeTokenizer::~BpeTokenizer() = default;

std::string BpeTokenizer::normalize(std::string_view text) const {
  std::string s(text);
  for (const NormalizerStep& step : cfg_.normalizers) {
    switch (step.kind) {
      case NormalizerStep::Kind::Nfc:
        s = nfc(s);
        break;
      case NormalizerStep::Kind::Replace:
        if (step.regex) {
          std::string out;
          size_t prev = 0;
          for (auto [b, e] : step.regex->find_all(s)) {
            out.append(s, prev, b - prev);
            out.append(step.content);
            prev = e;
          }
          out.append(s, prev, std::string::npos);
          s = std::move(out);
        } else {
          replace_all(s, step.pattern, step.content);
        }
        break;
      case NormalizerStep::Kind::Prepend:
        if (!s.empty()) s.insert(0, step.content);
        break;
    }
  }
  return s;
}

void BpeTokenizer::pre_tokenize(std::vector<Piece>& pieces) const {
  std::vector<Piece> next;
  auto push_spans = [&next](const Piece& p, const std::vector<Span>& spans) {
    for (const Span& s : spans)
      if (s.end > s.begin) next.push_back({p.text.substr(s.begin, s.end - s.begin), p.at_start && s.begin == 0});
  };
  for (const PreTokenizerStep& step : cfg_.pre_tokenizers) {
    next.clear();
    for (Piece& p : pieces) {
      switch (step.kind) {
        case PreTokenizerStep::Kind::Split: {
          const auto matches = step.regex ? step.regex->find_all(p.text) : find_literal(p.text, step.literal);
          push_spans(p, apply_behavior(matches, p.text.size(), step.behavior, step.invert));
          break;
        }
        case PreTokenizerStep::Kind::ByteLevel: {
          if (step.add_prefix_space && (p.text.empty() || p.text[0] != ' ')) p.text = " " + p.text;
          if (step.use_regex)
            push_spans(p, apply_behavior(gpt2_regex_->find_all(p.text), p.text.size(),
                                         SplitBehavior::Isolated, false));
          else
            next.push_back(std::move(p));
          break;
        }
        case PreTokenizerStep::Kind::Metaspace: {
          replace_all(p.text, " ", step.replacement);
          const bool prepend = step.prepend_scheme == PrependScheme::Always ||
                               (step.prepend_scheme == PrependScheme::First && p.at_start);
          if (prepend && !std::string_view(p.text).starts_with(step.replacement))
            p.text.insert(0, step.replacement);
          if (step.split)
            push_spans(p, apply_behavior(find_literal(p.text, step.replacement), p.text.size(),
                                         SplitBehavior::MergedWithNext, false));
          else
            next.push_back(std::move(p));
          break;
        }
        case PreTokenizerStep::Kind::Digits: {
          std::vector<std::pair<size_t, size_t>> matches;
          for (size_t i = 0; i < p.text.size(); ++i)
            if (p.text[i] >= '0' && p.text[i] <= '9') matches.emplace_back(i, i + 1);
          push_spans(p, apply_behavior(matches, p.text.size(),
                                       step.individual_digits ? SplitBehavior::Isolated
                                                              : SplitBehavior::Contiguous,
                                       false));
          break;
        }
      }
    }
    pieces.swap(next);
  }
}

std::optional<BpeTokenizer::MergeResult> BpeTokenizer::find_merge(int32_t left, int32_t right) const {
  if (!cfg_.use_scores) {
    auto it = merge_table_.find((static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right));
    if (it == merge_table_.end()) return std::nullopt;
    return it->second;
  }
  // Merges implied by scores: any two tokens whose concatenation is a token,
  // best merged-token score first, then longer left part, then token order.
  const std::string merged = cfg_.tokens[left] + cfg_.tokens[right];
  auto it = cfg_.vocab.find(merged);
  if (it == cfg_.vocab.end()) return std::nullopt;
  const int32_t t = it->second;
  const uint64_t rank = (static_cast<uint64_t>(score_rank_[t]) << 40) |
                        (static_cast<uint64_t>(255 - token_chars_[left]) << 32) |
                        (static_cast<uint64_t>(255 - token_chars_[right]) << 24) |
                        static_cast<uint64_t>(t);
  return MergeResult{rank, t};
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (cfg_.ignore_merges) {
    // A word that is a token as a whole skips the merges (Llama 3).
    std::string mapped;
    if (cfg_.byte_level) {
      mapped.reserve(word.size() * 2);
      for (unsigned char b : word) mapped += byte_level_chars()[b];
    }
    auto it = cfg_.vocab.find(cfg_.byte_level ? std::string_view(mapped) : word);
    if (it != cfg_.vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }

  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Symbol> syms;
  syms.reserve(word.size());
  bool pending_unk = false;
  auto add = [&syms](int32_t id) {
    const auto i = static_cast<int32_t>(syms.size());
    syms.push_back({id, i - 1, i + 1, true});
  };
  auto flush_unk = [&] {
    if (pending_unk) add(*cfg_.unk_id);
    pending_unk = false;
  };
  auto unknown = [&] {
    if (!cfg_.unk_id) return;  // HF drops the character when there is no unk token
    if (pending_unk && !cfg_.fuse_unk) add(*cfg_.unk_id);
    pending_unk = true;
  };
  if (cfg_.byte_level) {
    for (unsigned char b : word) {
      if (byte_ids_[b] >= 0) {
        flush_unk();
        add(byte_ids_[b]);
      } else {
        unknown();
      }
    }
  } else {
    for (size_t i = 0; i < word.size();) {
      const Utf8Step st = utf8_step(word, i);
      const std::string_view ch = word.substr(i, st.len);
      i += st.len;
      auto it = cfg_.vocab.find(ch);
      if (it != cfg_.vocab.end()) {
        flush_unk();
        add(it->second);
        continue;
      }
      if (cfg_.byte_fallback) {
        bool all = true;
        for (unsigned char b : ch) all = all && byte_fallback_ids_[b] >= 0;
        if (all) {
          for (unsigned char b : ch) add(byte_fallback_ids_[b]);
          continue;
        }
      }
      unknown();
    }
  }
  flush_unk();
  if (syms.empty()) return;
  syms.back().next = -1;

  struct Candidate {
    uint64_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator<(const Candidate& o) const {  // max-heap order: lowest rank, then leftmost, on top
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate> queue;
  for (size_t i = 0; i + 1 < syms.size(); ++i)
    if (auto m = find_merge(syms[i].id, syms[i + 1].id))
      queue.push({m->rank, static_cast<int32_t>(i), m->new_id});
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& cur = syms[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    const int32_t right_pos = cur.next;
    Symbol& right = syms[right_pos];
    // Stale entry: the pair at this position no longer merges into new_id.
    auto m = find_merge(cur.id, right.id);
    if (!m || m->new_id != top.new_id) continue;
    cur.id = top.new_id;
    cur.next = right.next;
    right.alive = false;
    if (right.next >= 0) syms[right.next].prev = top.pos;
    if (cur.prev >= 0)
      if (auto pm = find_merge(syms[cur.prev].id, cur.id)) queue.push({pm->rank, cur.prev, pm->new_id});
    if (cur.next >= 0)
      if (auto nm = find_merge(cur.id, syms[cur.next].id)) queue.push({nm->rank, top.pos, nm->new_id});
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

void BpeTokenizer::encode_text(std::string_view text, bool at_start, std::vector<int32_t>& out) const {
  std::string normalized = normalize(text);
  auto encode_piece = [&](std::string piece, bool piece_at_start) {
    std::vector<Piece> pieces;
    pieces.push_back({std::move(piece), piece_at_start});
    pre_tokenize(pieces);
    for (const Piece& p : pieces) encode_word(p.text, out);
  };
  if (norm_matcher_->empty()) {
    if (!normalized.empty()) encode_piece(std::move(normalized), at_start);
    return;
  }
  for (const auto& seg : norm_matcher_->split(normalized)) {
    if (seg.id >= 0)
      out.push_back(seg.id);
    else
      encode_piece(normalized.substr(seg.begin, seg.end - seg.begin), at_start && seg.begin == 0);
  }
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::string owned;
  if (!utf8_is_valid(text)) {
    owned = utf8_lossy(text);
    text = owned;
  }
  std::vector<int32_t> out;
  if (add_special && special_.add_bos && special_.bos) out.push_back(*special_.bos);
  const AddedMatcher& matcher = parse_special ? *raw_matcher_ : *raw_matcher_nospecial_;
  for (const auto& seg : matcher.split(text)) {
    if (seg.id >= 0)
      out.push_back(seg.id);
    else
      encode_text(text.substr(seg.begin, seg.end - seg.begin), seg.begin == 0, out);
  }
  if (add_special && special_.add_eos && special_.eos) out.push_back(*special_.eos);
  return out;
}

std::string BpeTokenizer::token_bytes(int32_t id, bool include_special) const {
  if (id < 0 || static_cast<size_t>(id) >= cfg_.tokens.size()) return {};
  if (special_flags_[id] && !include_special) return {};
  const std::string& text = cfg_.tokens[id];
  const DecoderSpec& d = cfg_.decoder;
  if (d.byte_level) {
    std::string bytes;
    bytes.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
      const Utf8Step st = utf8_step(text, i);
      const int b = st.valid ? byte_level_byte(st.cp) : -1;
      if (b < 0) return text;  // not spelled in the byte alphabet (an added token): as is
      bytes.push_back(static_cast<char>(b));
      i += st.len;
    }
    return bytes;
  }
  std::string s = text;
  for (const auto& [from, to] : d.replacements) replace_all(s, from, to);
  if (d.byte_fallback && s.size() == 6 && s.starts_with("<0x") && s[5] == '>') {
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    const int hi = hex(s[3]), lo = hex(s[4]);
    if (hi >= 0 && lo >= 0) return std::string(1, static_cast<char>(hi * 16 + lo));
  }
  return s;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) bytes += token_bytes(id, !skip_special);
  size_t strip = 0;
  while (strip < bytes.size() && static_cast<int>(strip) < strip_leading_spaces_ && bytes[strip] == ' ') ++strip;
  return utf8_lossy(std::string_view(bytes).substr(strip));
}

bool BpeTokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < special_flags_.size() && special_flags_[id] != 0;
}

std::optional<int32_t> BpeTokenizer::token_id(std::string_view token_text) const {
  if (auto it = added_by_content_.find(token_text); it != added_by_content_.end()) return it->second;
  if (auto it = cfg_.vocab.find(token_text); it != cfg_.vocab.end()) return it->second;
  return std::nullopt;
}

std::string_view BpeTokenizer::token_text(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= cfg_.tokens.size()) return {};
  return cfg_.tokens[id];
}

}  // namespace loom::tok

namespace loom {

// --- IncrementalDecoder ---

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special), strip_left_(tokenizer.decode_strip_leading_spaces()) {}

std::string IncrementalDecoder::push(int32_t id) {
  std::string bytes = tokenizer_.token_bytes(id, !skip_special_);
  if (strip_left_ > 0 && !bytes.empty()) {
    size_t strip = 0;
    while (strip < bytes.size() && strip_left_ > 0 && bytes[strip] == ' ') ++strip, --strip_left_;
    if (strip < bytes.size()) strip_left_ = 0;  // a non-space ends the leading run
    bytes.erase(0, strip);
  }
  pending_ += bytes;
  const size_t n = tok::utf8_stable_prefix(pending_);
  std::string out = tok::utf8_lossy(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return out;
}

std::string IncrementalDecoder::flush() {
  std::string out = tok::utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace loom
