// GrammarCompiler on a tiny vocabulary built by hand: masks allow exactly the
// tokens that continue the grammar, eos only at the end, only bytes that keep
// the output valid UTF-8, the cache hands out one factory per spec, and bad
// specs are GrammarErrors, and a compile past its deadline is interrupted.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <random>
#include <thread>

#include "structured/grammar_compiler.h"
#include "structured/schema_check.h"
#include "structured/utf8_token_masks.h"
#include "tokenizer/tokenizer.h"

using namespace loom;
using namespace loom::structured;
using json = nlohmann::ordered_json;

namespace {

// Byte tokens for a few characters, plus eos.
class TinyTokenizer : public Tokenizer {
 public:
  explicit TinyTokenizer(std::vector<std::string> vocab = {"a", "b", "c", "{", "}", "\"", ":", ",",
                                                           " ", "1", "2", "ab", "x"})
      : vocab_(std::move(vocab)) {
    vocab_.push_back("</s>");
    special_.eos = int32_t(vocab_.size()) - 1;
    special_.eos_ids = {*special_.eos};
  }
  std::vector<int32_t> encode(std::string_view, bool, bool) const override { return {}; }
  std::string token_bytes(int32_t id, bool) const override {
    return is_special(id) ? "" : vocab_[size_t(id)];
  }
  std::string decode(const std::vector<int32_t>& ids, bool) const override {
    std::string s;
    for (int32_t id : ids) s += token_bytes(id, false);
    return s;
  }
  int32_t vocab_size() const override { return int32_t(vocab_.size()); }
  bool is_special(int32_t id) const override { return id == *special_.eos; }
  std::optional<int32_t> token_id(std::string_view) const override { return std::nullopt; }
  std::string_view token_text(int32_t id) const override { return vocab_[size_t(id)]; }
  int32_t id(const std::string& t) const {
    return int32_t(std::find(vocab_.begin(), vocab_.end(), t) - vocab_.begin());
  }

 private:
  std::vector<std::string> vocab_;
};

std::vector<std::string> allowed(TokenConstraint& c, const TinyTokenizer& tok, int32_t vocab) {
  std::vector<uint32_t> words(size_t((vocab + 31) / 32), 0u);
  const bool masked = c.fill_next_token_bitmask(words);
  std::vector<std::string> out;
  for (int32_t t = 0; t < vocab; ++t)
    if (!masked || (words[size_t(t) / 32] >> (t % 32)) & 1u)
      out.push_back(t < tok.vocab_size() ? std::string(tok.token_text(t)) : "<pad>");
  return out;
}

}  // namespace

TEST(GrammarCompiler, ChoiceMasksAndEos) {
  if (!GrammarCompiler::available()) GTEST_SKIP() << "built without xgrammar";
  TinyTokenizer tok;
  const int32_t vocab = tok.vocab_size() + 40;  // padded like a model's logits
  GrammarCompiler compiler(tok, vocab);
  auto factory = compiler.compile(choice_spec({"ab", "c"}));
  auto c = factory->make();
  EXPECT_EQ(allowed(*c, tok, vocab), (std::vector<std::string>{"a", "c", "ab"}));
  ASSERT_TRUE(c->accept_token(tok.id("a")));
  EXPECT_EQ(allowed(*c, tok, vocab), (std::vector<std::string>{"b"}));
  EXPECT_FALSE(c->accept_token(tok.id("c")));
  auto fork = c->clone();
  ASSERT_TRUE(c->accept_token(tok.id("b")));
  EXPECT_EQ(allowed(*c, tok, vocab), (std::vector<std::string>{"</s>"}));
  ASSERT_TRUE(c->accept_token(tok.id("</s>")));
  EXPECT_TRUE(c->is_terminated());
  c->rollback(2);
  EXPECT_EQ(allowed(*c, tok, vocab), (std::vector<std::string>{"b"}));
  EXPECT_EQ(allowed(*fork, tok, vocab), (std::vector<std::string>{"b"}));
  // The cache: the same spec gives the same factory.
  EXPECT_EQ(compiler.compile(choice_spec({"ab", "c"})).get(), factory.get());
  EXPECT_EQ(compiler.stats().cache_hits, 1);
}

TEST(Utf8TokenMasks, WellFormedSequencesOnly) {
  using M = Utf8TokenMasks;
  EXPECT_EQ(M::advance(M::Start, "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80"), M::Start);
  EXPECT_EQ(M::advance(M::Start, "\xE4\xB8"), M::Cont1);  // mid-character: allowed
  for (const char* bad :
       {"\xED\xA0\x80", "\xC0\xAF", "\xE0\x80\xAF", "\xF4\x90\x80\x80", "\x80", "\xFF",
        "\xE4"
        "a"})
    EXPECT_EQ(M::advance(M::Start, bad), M::kInvalid) << bad;
  // Stop tokens only between characters; tokens that write nothing anywhere.
  const M masks({"a", "\xE4", "\xB8", "", "</s>"}, 1, {4});
  std::vector<uint32_t> w(1, ~0u);
  masks.restrict(M::Start, w);
  EXPECT_EQ(w[0] & 0x1Fu, 0b11011u);
  w[0] = ~0u;
  masks.restrict(M::advance(M::Start, "\xE4"), w);
  EXPECT_EQ(w[0] & 0x1Fu, 0b01100u);
}

TEST(GrammarCompiler, StringsStayValidUtf8) {
  if (!GrammarCompiler::available()) GTEST_SKIP() << "built without xgrammar";
  // Single bytes: the grammar alone would take ED A0 80 (an encoded
  // surrogate) as one character of the string.
  TinyTokenizer tok({"\"", "a", "\xED", "\xA0", "\x80", "\x9F"});
  GrammarCompiler compiler(tok, tok.vocab_size());
  auto c = compiler.compile(json_schema_spec(json::parse(R"({"type": "string", "maxLength": 2})")))
               ->make();
  ASSERT_TRUE(c->accept_token(tok.id("\"")));
  ASSERT_TRUE(c->accept_token(tok.id("\xED")));
  EXPECT_EQ(allowed(*c, tok, tok.vocab_size()), (std::vector<std::string>{"\x80", "\x9F"}));
  EXPECT_FALSE(c->accept_token(tok.id("\xA0")));
  auto fork = c->clone();
  ASSERT_TRUE(c->accept_token(tok.id("\x9F")));  // U+D7C0-U+D7FF: any continuation byte
  EXPECT_EQ(allowed(*c, tok, tok.vocab_size()), (std::vector<std::string>{"\xA0", "\x80", "\x9F"}));
  c->rollback(1);
  EXPECT_EQ(allowed(*c, tok, tok.vocab_size()), (std::vector<std::string>{"\x80", "\x9F"}));
  EXPECT_EQ(allowed(*fork, tok, tok.vocab_size()), (std::vector<std::string>{"\x80", "\x9F"}));
}

TEST(GrammarCompiler, BadSpecsAreGrammarErrors) {
  if (!GrammarCompiler::available()) GTEST_SKIP() << "built without xgrammar";
  TinyTokenizer tok;
  GrammarCompiler compiler(tok, tok.vocab_size());
  EXPECT_THROW(compiler.compile(ebnf_spec("root ::= missing")), GrammarError);
  EXPECT_THROW(compiler.compile(regex_spec("(a")), GrammarError);
  EXPECT_EQ(compiler.stats().failures, 2);
}

TEST(GrammarCompiler, ACompilePastItsDeadlineIsInterrupted) {
  if (!GrammarCompiler::available()) GTEST_SKIP() << "built without xgrammar";
  // 30,000 random lowercase tokens and an object of length-bounded strings:
  // many grammar states, each with a token mask over the whole vocabulary.
  std::mt19937 rng(7);
  std::vector<std::string> vocab;
  for (int i = 0; i < 30000; ++i) {
    std::string t(size_t(1 + rng() % 6), 'a');
    for (char& ch : t) ch = char('a' + rng() % 26);
    vocab.push_back(t);
  }
  for (const char* t : {"{", "}", "\"", ":", ",", " "}) vocab.push_back(t);
  TinyTokenizer tok(vocab);
  json props = json::object();
  for (int i = 0; i < 8; ++i)  // lengths of their own: no two fields share their states
    props["field" + std::to_string(i)] = {
        {"type", "string"}, {"minLength", 1}, {"maxLength", 40 + i}};
  const json schema = {{"type", "object"}, {"properties", props}, {"additionalProperties", false}};
  using clock = std::chrono::steady_clock;
  const auto ms = [](clock::duration d) {
    return std::chrono::duration<double, std::milli>(d).count();
  };

  // A whole compile's time, or a lower bound of it where it takes longer
  // than kProbe (sanitizer builds: minutes); the interrupted compile below
  // must free the pool well before that.
  constexpr double kProbe = 5000;
  CompilerOptions probe;
  probe.threads = 1;
  probe.max_compile_time = std::chrono::milliseconds(int64_t(kProbe));
  double full_ms = 0;
  {
    GrammarCompiler compiler(tok, tok.vocab_size(), probe);
    const auto start = clock::now();
    try {
      compiler.compile(json_schema_spec(schema));
      full_ms = ms(clock::now() - start);
    } catch (const GrammarError& e) {
      ASSERT_EQ(e.kind(), GrammarError::Kind::Timeout) << e.what();
      full_ms = kProbe;
    }
  }
  ASSERT_GE(full_ms, 200.0)
      << "the compile is too quick to tell an interrupted one from a finished one: " << full_ms;

  CompilerOptions bounded = probe;
  bounded.max_compile_time = std::chrono::milliseconds(int64_t(full_ms / 20));
  // The pool's only thread is freed soon after the deadline, long before the
  // compile would have finished. A loaded machine can stall one attempt past
  // that: the quickest of three counts.
  std::unique_ptr<GrammarCompiler> compiler;
  double freed_ms = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    compiler = std::make_unique<GrammarCompiler>(tok, tok.vocab_size(), bounded);
    const auto start = clock::now();
    try {
      compiler->compile(json_schema_spec(schema));
      FAIL() << "compiled within " << bounded.max_compile_time.count() << " ms";
    } catch (const GrammarError& e) {
      EXPECT_EQ(e.kind(), GrammarError::Kind::Timeout) << e.what();
    }
    while (compiler->stats().interrupted + compiler->stats().compiles == 0 &&
           ms(clock::now() - start) < 4 * full_ms)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    freed_ms = ms(clock::now() - start);
    EXPECT_EQ(compiler->stats().interrupted, 1);
    EXPECT_EQ(compiler->stats().compiles, 0);
    if (freed_ms < full_ms / 2) break;
  }
  EXPECT_LT(freed_ms, full_ms / 2) << "a whole compile takes " << full_ms << " ms";
  // The interrupted grammar was not cached: asking again compiles again.
  EXPECT_THROW(compiler->compile(json_schema_spec(schema)), GrammarError);
  EXPECT_EQ(compiler->stats().cache_hits, 0);
}

TEST(SchemaCheck, NamesWhatCannotBeEnforced) {
  auto message = [](const char* schema) -> std::string {
    try {
      prepare_json_schema(json::parse(schema), {});
    } catch (const GrammarError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(message(R"({"type": "object", "properties": {"a": {"type": "string"}}})"), "");
  EXPECT_NE(message(R"({"properties": {"a": {"not": {}}}})").find("/properties/a: 'not'"),
            std::string::npos);
  EXPECT_NE(message(R"({"type": "number", "multipleOf": 0.1})").find("multipleOf"),
            std::string::npos);
  EXPECT_NE(message(R"({"type": "array", "uniqueItems": true})").find("uniqueItems"),
            std::string::npos);
  EXPECT_NE(message(R"({"allOf": [{}, {}]})").find("allOf"), std::string::npos);
  EXPECT_NE(message(R"({"type": "string", "format": "iban"})").find("iban"), std::string::npos);
  EXPECT_NE(message(R"({"type": "string", "pattern": "a+", "maxLength": 3})").find("maxLength"),
            std::string::npos);
  EXPECT_NE(message(R"({"$ref": "#/$defs/a", "type": "string", "$defs": {"a": {}}})")
                .find("'type' next to '$ref'"),
            std::string::npos);
  EXPECT_NE(message(R"({"enum": ["a", 1], "type": "string"})").find("enum value 1"),
            std::string::npos);
  EXPECT_NE(message(R"({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 2}]})")
                .find("oneOf"),
            std::string::npos);
  EXPECT_EQ(message(R"({"oneOf": [{"type": "string"}, {"type": "integer"}]})"), "");
  EXPECT_NE(message(R"({"type": "object", "required": ["z"]})").find("'z'"), std::string::npos);
  // ipv4 becomes an exact pattern.
  const json p = prepare_json_schema(json::parse(R"({"type": "string", "format": "ipv4"})"), {});
  EXPECT_FALSE(p.contains("format"));
  EXPECT_TRUE(p.contains("pattern"));
}

TEST(SchemaCheck, BoundsWhatMakesCompilesSlowAndRefusesInfiniteSchemas) {
  auto message = [](const json& schema) -> std::string {
    try {
      prepare_json_schema(schema, {});
    } catch (const GrammarError& e) {
      return e.what();
    }
    return "";
  };
  json many = json::array();
  for (int i = 0; i < 1025; ++i) many.push_back(std::to_string(i) + "v");
  EXPECT_NE(message({{"enum", many}}).find("enum/const values"), std::string::npos);
  many.erase(many.begin());
  EXPECT_EQ(message({{"enum", many}}), "");
  // Values count across the schema.
  EXPECT_NE(message({{"type", "object"},
                     {"properties", {{"a", {{"enum", many}}}, {"b", {{"const", "x"}}}}}})
                .find("enum/const values"),
            std::string::npos);
  EXPECT_NE(message({{"type", "string"}, {"maxLength", 100000}}).find("'maxLength'"),
            std::string::npos);
  EXPECT_EQ(message({{"type", "string"}, {"maxLength", 4096}}), "");
  EXPECT_NE(message({{"type", "string"}, {"pattern", "^(a|b){1,5000}$"}}).find("5000 times"),
            std::string::npos);
  // Recursion with a way out is fine; a required self-reference is not.
  EXPECT_EQ(message(json::parse(R"({"type": "object", "properties": {"next": {"$ref": "#"}},
                                    "additionalProperties": false})")),
            "");
  EXPECT_NE(message(json::parse(R"({"type": "object", "properties": {"next": {"$ref": "#"}},
                                    "required": ["next"], "additionalProperties": false})"))
                .find("no finite value"),
            std::string::npos);
  EXPECT_NE(message(json::parse(R"({"$defs": {"n": {"type": "array", "minItems": 1,
                                    "items": {"$ref": "#/$defs/n"}}}, "$ref": "#/$defs/n"})"))
                .find("no finite value"),
            std::string::npos);
  EXPECT_EQ(message(json::parse(R"({"$defs": {"t": {"anyOf": [{"type": "integer"},
                                    {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/t"}}]}},
                                    "$ref": "#/$defs/t"})")),
            "");
}

TEST(GrammarSpec, CountedRepetitionsAreBounded) {
  EXPECT_EQ(max_counted_repetition("a{3}b{2,17}c{4,}"), 17);
  EXPECT_EQ(max_counted_repetition("[{]999}\\{999}"), 0);  // a class and an escape: literals
  EXPECT_EQ(max_counted_repetition("x{1, 300}"), 300);
  EXPECT_THROW(regex_spec("[a-z]{1,20000}"), GrammarError);
  EXPECT_THROW(ebnf_spec("root ::= \"a\"{1,9999}"), GrammarError);
  EXPECT_NO_THROW(regex_spec("[a-z]{1,256}"));
}
