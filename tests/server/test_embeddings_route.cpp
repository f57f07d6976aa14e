// POST /v1/embeddings in OpenAiServer over a fake engine, without HTTP: each
// input becomes one pooling request (the model's pooling type, normalize,
// priority, tenant), vectors come back in input order with usage; an engine
// error on one input aborts the others and answers with its status; tenant
// limits apply; metrics and the tenant's prompt tokens are counted.
#include <gtest/gtest.h>

#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "server/openai_server.h"
#include "tokenizer/tokenizer.h"

using namespace loom;
using namespace loom::server;
using nlohmann::json;

namespace {

const Tokenizer& tokenizer() {
  static auto tok =
      load_tokenizer_hf(std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/tokenizer/qwen2");
  return *tok;
}

ModelContext model_ctx() {
  ModelContext m;
  m.name = "embed-model";
  m.tokenizer = &tokenizer();
  m.max_model_len = 512;
  m.vocab_size = tokenizer().vocab_size();
  m.pooling = PoolingType::Mean;
  return m;
}

// Answers a pooling request at once with the vector {first token, length}.
// A prompt starting with token 1 gets a queue-full error; 2 makes submit throw.
class FakeService : public GenerationService {
 public:
  RequestId submit(Request request, StreamCallback callback) override {
    if (request.prompt_ids[0] == 2) throw Error("prompt token refused");
    const RequestId id = next_++;
    {
      std::lock_guard<std::mutex> lk(mu_);
      submitted.push_back(request);
    }
    StreamEvent e;
    e.request_id = id;
    e.request_done = true;
    if (request.prompt_ids[0] == 1) {
      e.finish = FinishReason::Error;
      e.error = EngineErrorKind::QueueFull;
      e.error_message = "waiting queue full";
    } else {
      e.finish = FinishReason::Stop;
      e.embedding = {float(request.prompt_ids[0]), float(request.prompt_ids.size())};
    }
    callback(e);
    return id;
  }
  void abort(RequestId id) override {
    std::lock_guard<std::mutex> lk(mu_);
    aborted.push_back(id);
  }
  EngineStats stats() const override { return {}; }

  std::mutex mu_;
  std::vector<Request> submitted;
  std::vector<RequestId> aborted;
  RequestId next_ = 1;
};

class CaptureSink : public ResponseSink {
 public:
  void send(HttpResponse response) override { response_ = std::move(response); }
  void begin_stream(int status, std::string, HttpHeaders) override { response_.status = status; }
  void write(std::string chunk) override { response_.body += chunk; }
  void end_stream() override {}
  void on_close(std::function<void()>) override {}
  const HttpResponse& response() const { return response_; }

 private:
  HttpResponse response_;
};

HttpResponse post(OpenAiServer& server, const json& body, const std::string& key = "") {
  HttpRequest req;
  req.method = "POST";
  req.target = "/v1/embeddings";
  req.body = body.dump();
  if (!key.empty()) req.headers["authorization"] = "Bearer " + key;
  auto sink = std::make_shared<CaptureSink>();
  server.handle(std::move(req), sink);
  return sink->response();
}

}  // namespace

TEST(EmbeddingsRoute, OnePoolingRequestPerInputInOrder) {
  FakeService service;
  TenantRegistry tenants;
  tenants.add_tenant(Tenant{"alice", {}, 2.0f}, {"sk-a"});
  OpenAiServer server(OpenAiServerConfig{}, service, model_ctx(), std::move(tenants));
  const HttpResponse r = post(
      server, {{"input", {{7, 8, 9}, {5}, {6, 6}}}, {"normalize", false}, {"priority", 4}}, "sk-a");
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = json::parse(r.body);
  ASSERT_EQ(body["data"].size(), 3u);
  EXPECT_EQ(body["data"][0]["embedding"], json({7.0, 3.0}));
  EXPECT_EQ(body["data"][1]["embedding"], json({5.0, 1.0}));
  EXPECT_EQ(body["data"][2]["index"], 2);
  EXPECT_EQ(body["usage"]["prompt_tokens"], 6);
  EXPECT_EQ(body["model"], "embed-model");
  ASSERT_EQ(service.submitted.size(), 3u);
  for (const Request& q : service.submitted) {
    ASSERT_TRUE(q.pooling.has_value());
    EXPECT_EQ(q.pooling->type, PoolingType::Mean);
    EXPECT_FALSE(q.pooling->normalize);
    EXPECT_EQ(q.priority, 4);
    EXPECT_EQ(q.tenant, "alice");
    EXPECT_EQ(q.tenant_weight, 2.0f);
    EXPECT_EQ(q.cache_salt, "alice");
  }
  Metrics& m = server.metrics();
  EXPECT_EQ(m.value("loom_requests_total", {{"route", "/v1/embeddings"}, {"status", "200"}}), 1);
  EXPECT_EQ(m.value("loom_tenant_tokens_total", {{"tenant", "alice"}, {"kind", "prompt"}}), 6);
  EXPECT_EQ(server.in_flight(), 0u);
}

TEST(EmbeddingsRoute, AnEngineErrorAnswersForTheRequest) {
  FakeService service;
  OpenAiServer server(OpenAiServerConfig{}, service, model_ctx());
  const HttpResponse full = post(server, {{"input", {{7}, {1, 5}, {8}}}});
  EXPECT_EQ(full.status, 503) << full.body;
  EXPECT_EQ(service.aborted.size(), 1u) << "the input submitted before the failing one is aborted";
  const HttpResponse refused = post(server, {{"input", {{7}, {2}}}});
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_EQ(json::parse(refused.body)["error"]["param"], "input");
  EXPECT_EQ(server.in_flight(), 0u);
  Metrics& m = server.metrics();
  EXPECT_EQ(m.value("loom_requests_total", {{"route", "/v1/embeddings"}, {"status", "503"}}), 1);
}

TEST(EmbeddingsRoute, TenantLimitsAndParseErrors) {
  FakeService service;
  TenantRegistry tenants;
  tenants.add_tenant(Tenant{"alice", {0, 0, 4}}, {"sk-a"});
  OpenAiServer server(OpenAiServerConfig{}, service, model_ctx(), std::move(tenants));
  EXPECT_EQ(post(server, {{"input", {{7, 7, 7, 7, 7}}}}, "sk-a").status, 400);
  EXPECT_EQ(post(server, {{"input", {{7, 7}}}}).status, 401);
  const HttpResponse dims = post(server, {{"input", "x"}, {"dimensions", 8}}, "sk-a");
  EXPECT_EQ(dims.status, 400);
  EXPECT_EQ(json::parse(dims.body)["error"]["param"], "dimensions");
  EXPECT_TRUE(service.submitted.empty());
  Metrics& m = server.metrics();
  EXPECT_EQ(m.value("loom_tenant_requests_total", {{"tenant", "alice"}, {"status", "400"}}), 2);
}
