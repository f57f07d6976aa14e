// Server pieces without HTTP: API keys and tenant limits, the RE2 request
// filter, Prometheus rendering, and OpenAI response bodies from engine events.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/request_filter.h"
#include "server/response_builder.h"
#include "server/tenants.h"
#include "tokenizer/tokenizer.h"

using namespace loom;
using namespace loom::server;
using nlohmann::json;

TEST(Tenants, KeysAndConstantTimeCompare) {
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "abcd"));
  EXPECT_FALSE(constant_time_equal("", "a"));
  TenantRegistry reg;
  EXPECT_FALSE(reg.enabled());
  reg.add_tenant({"alice", {}}, {"sk-1"});
  reg.add_tenant({"bob", {}}, {"sk-2", "sk-2b"});
  ASSERT_TRUE(reg.enabled());
  EXPECT_EQ(reg.authenticate("Bearer sk-1")->name, "alice");
  EXPECT_EQ(reg.authenticate("Bearer sk-2")->name, "bob");
  EXPECT_EQ(reg.authenticate("Bearer sk-2b")->name, "bob");
  EXPECT_EQ(reg.authenticate("bearer  sk-1")->name, "alice");  // the scheme is case-insensitive
  EXPECT_EQ(reg.authenticate("Bearer sk-3"), nullptr);
  EXPECT_EQ(reg.authenticate(""), nullptr);
  EXPECT_EQ(reg.authenticate("Bearer "), nullptr);
  EXPECT_THROW(reg.add_tenant({"x", {}}, {""}), loom::Error);
}

// A key is a key of one tenant, and a name is one tenant: the file is
// refused otherwise (a key in two tenants resolved silently to the first; a
// tenant "default" in the file merged with the --api-key keys).
TEST(Tenants, NamesAndKeysAreUnique) {
  TenantRegistry reg;
  reg.add_tenant({"default", {}}, {"sk-cli"});
  EXPECT_THROW(reg.add_tenant({"default", {4, 0, 0}}, {"sk-other"}), loom::Error);
  EXPECT_THROW(reg.add_tenant({"carol", {}}, {"sk-cli"}), loom::Error);
  EXPECT_THROW(reg.add_tenant({"dave", {}}, {"k", "k"}), loom::Error);
  EXPECT_THROW(reg.add_tenant({"", {}}, {"k"}), loom::Error);
  EXPECT_EQ(reg.authenticate("Bearer sk-other"), nullptr);  // nothing of a refused tenant stays
  const std::string path =
      ::testing::TempDir() + "loom_tenants_dup_" + std::to_string(::getpid()) + ".json";
  std::ofstream(path)
      << R"({"tenants": [{"name": "a", "keys": ["k1"]}, {"name": "b", "keys": ["k1"]}]})";
  TenantRegistry two;
  EXPECT_THROW(two.load_file(path), loom::Error);
  std::ofstream(path) << R"({"tenants": [{"name": "default", "keys": ["k2"]}]})";
  EXPECT_THROW(reg.load_file(path), loom::Error);
  std::remove(path.c_str());
}

// Only "Bearer <key>": a bare key or another scheme is not a credential.
TEST(Tenants, OnlyBearerCredentials) {
  TenantRegistry reg;
  reg.add_tenant({"alice", {}}, {"sk-1"});
  EXPECT_EQ(reg.authenticate("sk-1"), nullptr);
  EXPECT_EQ(reg.authenticate("Basic sk-1"), nullptr);
  EXPECT_EQ(reg.authenticate("Bearersk-1"), nullptr);
  EXPECT_EQ(reg.authenticate("Bearer sk-1")->name, "alice");
}

TEST(Tenants, FileWithWeights) {
  auto load = [](const std::string& text) {
    const std::string path =
        ::testing::TempDir() + "loom_tenants_" + std::to_string(::getpid()) + ".json";
    std::ofstream(path) << text;
    TenantRegistry reg;
    try {
      reg.load_file(path);
    } catch (...) {
      std::remove(path.c_str());
      throw;
    }
    std::remove(path.c_str());
    return reg;
  };
  TenantRegistry reg = load(R"({"tenants": [{"name": "a", "keys": ["k1"], "weight": 2.5},
                                             {"name": "b", "keys": ["k2"]}]})");
  EXPECT_EQ(reg.authenticate("Bearer k1")->weight, 2.5f);
  EXPECT_EQ(reg.authenticate("Bearer k2")->weight, 1.0f);
  for (const char* bad : {"0", "-1", "\"2\"", "1e7", "null"})
    EXPECT_THROW(
        load(std::string(R"({"tenants": [{"name": "a", "keys": ["k"], "weight": )") + bad + "}]}"),
        loom::Error)
        << bad;
}

TEST(Tenants, ConcurrencyAndTokensPerMinute) {
  TenantLimiter lim;
  Tenant t{"t", {2, 600, 0}};  // 2 at once, 600 tokens/minute = 10/s
  auto now = TenantLimiter::Clock::now();
  EXPECT_TRUE(lim.try_admit(t, 100, now).admitted);
  EXPECT_TRUE(lim.try_admit(t, 100, now).admitted);
  auto d = lim.try_admit(t, 100, now);
  EXPECT_FALSE(d.admitted);
  EXPECT_EQ(d.reason, "concurrency");
  EXPECT_GE(d.retry_after_seconds, 1);
  lim.release(t, 450, now);  // bucket: 600 - 200 - 450 = -50
  EXPECT_EQ(lim.in_flight("t"), 1);
  d = lim.try_admit(t, 10, now);
  EXPECT_FALSE(d.admitted);
  EXPECT_EQ(d.reason, "tokens_per_minute");
  EXPECT_GE(d.retry_after_seconds, 5);  // 50 tokens at 10/s
  EXPECT_LE(d.retry_after_seconds, 6);
  EXPECT_TRUE(lim.try_admit(t, 10, now + std::chrono::seconds(6)).admitted);
  // unlimited tenants are never refused
  Tenant free{"free", {}};
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(lim.try_admit(free, 1 << 20, now).admitted);
}

TEST(RequestFilter, Rules) {
  RequestFilter f({{"secret", "(?i)password\\s*="}, {"ssn", "\\b\\d{3}-\\d{2}-\\d{4}\\b"}});
  EXPECT_EQ(f.check("my PASSWORD = x"), "secret");
  EXPECT_EQ(f.check("id 123-45-6789"), "ssn");
  EXPECT_EQ(f.check("nothing here"), std::nullopt);
  EXPECT_EQ(RequestFilter().check("anything"), std::nullopt);
  EXPECT_THROW(RequestFilter(std::vector<DenyRule>{{"bad", "(unclosed"}}), loom::Error);
  // RE2 is linear time: a classic catastrophic-backtracking pattern is fast.
  RequestFilter evil(std::vector<DenyRule>{{"evil", "(a+)+$"}});
  std::string text(100000, 'a');
  text += 'b';
  EXPECT_EQ(evil.check(text), std::nullopt);
}

// Fullwidth letters and invisible characters inside a word slipped past a
// rule matched on the raw text only.
TEST(RequestFilter, LookalikesAndInvisibles) {
  RequestFilter f(std::vector<DenyRule>{{"secret", "(?i)password"}});
  for (const char* text : {"my password", "my \uFF50\uFF41\uFF53\uFF53\uFF57\uFF4F\uFF52\uFF44",
                           "my pass\u200Bword", "my pa\u00ADssword", "my PASS\u2060WORD",
                           "my p\u200Da\u200Cssword", "my pass\uFEFFword"})
    EXPECT_EQ(f.check(text), "secret") << text;
  EXPECT_EQ(f.check("my passport"), std::nullopt);
  RequestFilter raw(std::vector<DenyRule>{{"secret", "(?i)password"}}, /*normalize=*/false);
  EXPECT_EQ(raw.check("my pass\u200Bword"), std::nullopt);
  EXPECT_EQ(normalize_for_matching("\uFF21\u200B\u00BD cafe\u0301"), "A1\u20442 caf\u00E9");
  EXPECT_EQ(normalize_for_matching("bad \xFF utf8"), "bad \uFFFD utf8");
}

TEST(Metrics, PrometheusText) {
  Metrics m;
  m.declare_counter("loom_x_total", "x");
  m.declare_gauge("loom_g", "g");
  m.declare_histogram("loom_h_seconds", "h", {0.1, 1.0});
  m.inc("loom_x_total", {{"route", "/a"}, {"status", "200"}});
  m.inc("loom_x_total", {{"route", "/a"}, {"status", "200"}}, 2);
  m.set("loom_g", 0.5);
  m.observe("loom_h_seconds", 0.05);
  m.observe("loom_h_seconds", 0.5);
  m.observe("loom_h_seconds", 5);
  const std::string text = m.render();
  EXPECT_NE(text.find("# TYPE loom_x_total counter"), std::string::npos);
  EXPECT_NE(text.find("loom_x_total{route=\"/a\",status=\"200\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("loom_g 0.5\n"), std::string::npos);
  EXPECT_NE(text.find("loom_h_seconds_bucket{le=\"0.1\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("loom_h_seconds_bucket{le=\"1\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("loom_h_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("loom_h_seconds_count 3\n"), std::string::npos);
  EXPECT_EQ(m.value("loom_x_total", {{"route", "/a"}, {"status", "200"}}), 3);
  EXPECT_EQ(render_labels({{"k", "a\"b\\c\nd"}}), "{k=\"a\\\"b\\\\c\\nd\"}");
  EXPECT_THROW(m.inc("loom_undeclared"), loom::Error);
}

namespace {
const Tokenizer& tokenizer() {
  static auto tok =
      load_tokenizer_hf(std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/tokenizer/qwen2");
  return *tok;
}
StreamEvent token_event(int32_t seq, int32_t token, std::string text,
                        FinishReason finish = FinishReason::None, bool done = false) {
  StreamEvent e;
  e.seq_index = seq;
  e.token_ids = {token};
  e.text = std::move(text);
  e.finish = finish;
  e.request_done = done;
  return e;
}
}  // namespace

TEST(ResponseBuilder, CompletionBodyWithEchoAndLogprobs) {
  GenerationRequest r;
  r.endpoint = Endpoint::Completions;
  r.model = "m";
  r.prompts = {{1, 2}, {3}};
  r.prompt_texts = {"ab", "c"};
  r.params.n = 2;
  r.echo = true;
  r.logprobs = true;
  r.params.logprobs = 1;
  ResponseBuilder b(r, tokenizer(), "cmpl-1", 42);
  StreamEvent e = token_event(0, 15, "0");
  e.logprobs = {SampleResult{15, -0.5f, {{15, -0.5f}}}};
  e.prompt_logprobs = {SampleResult{2, -1.25f, {{7, -0.25f}}}};  // prompt token 1, from sequence 0
  EXPECT_TRUE(b.on_event(0, e).empty());  // not streaming
  b.on_event(0, token_event(0, 16, "1", FinishReason::Length));
  b.on_event(0, token_event(1, 17, "2", FinishReason::Stop, true));
  EXPECT_FALSE(b.done());
  b.on_event(1, token_event(0, 18, "3", FinishReason::Length));
  b.on_event(1, token_event(1, 19, "4", FinishReason::Length, true));
  ASSERT_TRUE(b.done());
  json j = json::parse(b.final_body());
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["created"], 42);
  ASSERT_EQ(j["choices"].size(), 4u);
  EXPECT_EQ(j["choices"][0]["text"], "ab01");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][1]["text"], "ab2");
  EXPECT_EQ(j["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][3]["text"], "c4");
  // The echoed prompt's tokens lead (the first without a logprob), then the generated ones.
  const json& lp = j["choices"][0]["logprobs"];
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["token_logprobs"][1], -1.25);
  EXPECT_EQ(lp["top_logprobs"][1].size(), 1u);
  EXPECT_EQ(lp["token_logprobs"][2], -0.5);
  EXPECT_EQ(lp["text_offset"][0], 0);
  EXPECT_EQ(lp["text_offset"][2], 2);
  // The sibling of the same prompt gets the same prompt scores.
  EXPECT_EQ(j["choices"][1]["logprobs"]["token_logprobs"][1], -1.25);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  EXPECT_EQ(j["usage"]["total_tokens"], 8);
}

TEST(ResponseBuilder, ChatStreamChunks) {
  GenerationRequest r;
  r.endpoint = Endpoint::ChatCompletions;
  r.model = "m";
  r.prompts = {{1, 2, 3}};
  r.prompt_texts = {"p"};
  r.stream = true;
  r.include_usage = true;
  ResponseBuilder b(r, tokenizer(), "chatcmpl-1", 1);
  auto c1 = b.on_event(0, token_event(0, 15, "Hel"));
  ASSERT_EQ(c1.size(), 1u);
  json j1 = json::parse(c1[0]);
  EXPECT_EQ(j1["object"], "chat.completion.chunk");
  EXPECT_EQ(j1["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(j1["choices"][0]["delta"]["content"], "Hel");
  EXPECT_TRUE(j1["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(j1["usage"].is_null());
  auto c2 = b.on_event(0, token_event(0, 16, "", FinishReason::Stop, true));
  ASSERT_EQ(c2.size(), 1u);
  json j2 = json::parse(c2[0]);
  EXPECT_FALSE(j2["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(j2["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(b.done());
  json u = json::parse(b.usage_chunk());
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["completion_tokens"], 2);
  EXPECT_EQ(u["usage"]["prompt_tokens"], 3);
}

// Streamed chunks without logprobs, reasoning or tool calls are written
// directly: byte for byte the dump of the JSON object the other chunks are
// built as (keys in order), whatever the text holds.
TEST(ResponseBuilder, DirectChunksEqualTheJsonDump) {
  const std::vector<std::string> texts = {"Hel",
                                          "",
                                          "a \"quoted\" \\ back",
                                          "\x01\x1f\n\t\r\b\f",
                                          "\xc3\xa9\xe6\xbc\xa2\xf0\x9f\x98\x80",
                                          "\xff\xfe bad",
                                          "</s>\u2028"};
  for (Endpoint ep : {Endpoint::Completions, Endpoint::ChatCompletions})
    for (bool usage : {false, true})
      for (bool echo : {false, true}) {
        const bool chat = ep == Endpoint::ChatCompletions;
        if (chat && echo) continue;  // echo is a completions field
        GenerationRequest r;
        r.endpoint = ep;
        r.model = "m \"x\"\\\xff";
        r.prompts = {{1, 2}};
        r.prompt_texts = {"pr\"ompt"};
        r.params.n = 2;
        r.stream = true;
        r.include_usage = usage;
        r.echo = echo;
        const std::string id = "cmpl-\"7\"";
        ResponseBuilder b(r, tokenizer(), id, 1234567890);
        std::vector<bool> started(2, false);
        for (size_t t = 0; t <= texts.size(); ++t)
          for (int32_t seq = 0; seq < 2; ++seq) {
            const bool last = t == texts.size();
            std::string text = last ? (seq == 0 ? "end" : "") : texts[t];
            const FinishReason fr = !last      ? FinishReason::None
                                    : seq == 0 ? FinishReason::Length
                                               : FinishReason::Stop;
            const auto got =
                b.on_event(0, token_event(seq, 100 + int32_t(t), text, fr, last && seq == 1));
            const bool first = !started[size_t(seq)];
            started[size_t(seq)] = true;
            if (echo && first) text = r.prompt_texts[0] + text;
            if (text.empty() && !first && !last) {
              EXPECT_TRUE(got.empty());
              continue;
            }
            json chunk = {{"id", id},
                          {"object", chat ? "chat.completion.chunk" : "text_completion"},
                          {"created", 1234567890},
                          {"model", r.model},
                          {"choices", json::array()}};
            if (usage) chunk["usage"] = nullptr;
            json choice = {
                {"index", size_t(seq)},
                {"logprobs", nullptr},
                {"finish_reason", last ? json(seq == 0 ? "length" : "stop") : json(nullptr)}};
            if (chat) {
              json delta = json::object();
              if (first) delta["role"] = "assistant";
              if (!text.empty() || first) delta["content"] = text;
              choice["delta"] = delta;
            } else {
              choice["text"] = text;
            }
            chunk["choices"].push_back(choice);
            ASSERT_EQ(got.size(), 1u);
            EXPECT_EQ(got[0], chunk.dump(-1, ' ', false, json::error_handler_t::replace))
                << "text " << json(text).dump(-1, ' ', true, json::error_handler_t::replace);
          }
        EXPECT_TRUE(b.done());
      }
}
