// GrammarCompiler on a tiny vocabulary built by hand: masks allow exactly the
// tokens that continue the grammar, eos only at the end, the cache hands out
// one factory per spec, and bad specs are GrammarErrors.
#include <gtest/gtest.h>

#include "structured/grammar_compiler.h"
#include "structured/schema_check.h"
#include "tokenizer/tokenizer.h"

using namespace loom;
using namespace loom::structured;
using json = nlohmann::ordered_json;

namespace {

// Byte tokens for a few characters, plus eos.
class TinyTokenizer : public Tokenizer {
 public:
  TinyTokenizer() {
    for (const char* t : {"a", "b", "c", "{", "}", "\"", ":", ",", " ", "1", "2", "ab", "x"})
      vocab_.push_back(t);
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

TEST(GrammarCompiler, BadSpecsAreGrammarErrors) {
  if (!GrammarCompiler::available()) GTEST_SKIP() << "built without xgrammar";
  TinyTokenizer tok;
  GrammarCompiler compiler(tok, tok.vocab_size());
  EXPECT_THROW(compiler.compile(ebnf_spec("root ::= missing")), GrammarError);
  EXPECT_THROW(compiler.compile(regex_spec("(a")), GrammarError);
  EXPECT_EQ(compiler.stats().failures, 2);
}

TEST(SchemaCheck, NamesWhatCannotBeEnforced) {
  auto message = [](const char* schema) -> std::string {
    try {
      prepare_json_schema(json::parse(schema), 32);
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
  const json p = prepare_json_schema(json::parse(R"({"type": "string", "format": "ipv4"})"), 32);
  EXPECT_FALSE(p.contains("format"));
  EXPECT_TRUE(p.contains("pattern"));
}
