// OpenAiServer: the routes of `loom serve` over a GenerationService —
// /v1/completions, /v1/chat/completions (JSON or SSE), /v1/messages and
// /v1/responses (through the chat path: anthropic_api.h, responses_api.h),
// /v1/embeddings (pooling requests: embeddings_api.h),
// /v1/models[/{id}], /tokenize, /detokenize, /tokenizer_info, /health,
// /ready, /metrics, /version — with API keys (Authorization or x-api-key),
// per-tenant limits, the request filter, metrics and one access-log line per
// request. Transport free: HttpServer calls handle() on its worker threads. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "server/engine_watchdog.h"
#include "server/generation_service.h"
#include "server/gpu_metrics.h"
#include "server/http_server.h"
#include "server/http_types.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/request_filter.h"
#include "server/tenants.h"
#include "structured/grammar_compiler.h"

namespace loom::server {

struct OpenAiServerConfig {
  RequestLimits limits;
  std::chrono::milliseconds watchdog{30000};  // /ready fails when busy and no step for this long
  std::chrono::milliseconds stats_interval{500};
  std::chrono::milliseconds parse_timeout{10000};  // a JSON body still parsing then: 400
  // Freed heap memory is given back to the kernel this often, when requests
  // finished since the last time (heap_trim.h); zero: never.
  std::chrono::milliseconds heap_trim_interval{10000};
  int64_t retry_after_seconds = 1;                // on 503 queue full / shutting down
  std::shared_ptr<GpuMetricsSource> gpu_metrics;  // null: no loom_gpu_* series
  // The watchdog's clock; null: steady_clock::now. Tests step it by hand.
  std::function<std::chrono::steady_clock::time_point()> watchdog_clock;
  bool log_requests = true;     // one access-log line per request (info level)
  bool metrics_public = false;  // /metrics answers without an API key (Prometheus scrapes)
  // {"version", "commit", "build": {...}}: GET /version and the loom_build_info
  // series (labels version, commit). Null: /version answers 404.
  nlohmann::json build_info;
  // Compiles response_format / guided_* / forced tool-call grammars over the
  // model's vocabulary (on its own pool; the HTTP worker waits, bounded).
  // Null: such requests get a 400.
  std::shared_ptr<structured::GrammarCompiler> grammars;
};

class OpenAiServer {
 public:
  // service, model's tokenizer and chat formatter must outlive the server.
  OpenAiServer(OpenAiServerConfig config, GenerationService& service, ModelContext model,
               TenantRegistry tenants = {}, RequestFilter filter = {});
  ~OpenAiServer();
  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  void handle(HttpRequest request, std::shared_ptr<ResponseSink> sink);
  // The routes cheap enough to answer on an I/O thread (/health, /ready), so
  // that slow requests on the worker pool never hold them up
  // (HttpServerConfig::run_inline).
  static bool runs_inline(const HttpRequest& request);
  DrainHooks drain_hooks();
  Metrics& metrics() { return metrics_; }
  size_t in_flight() const;

  // A request in flight in the engine: counted by drain, aborted at shutdown.
  struct Exchange {
    virtual ~Exchange() = default;
    // Any thread. After a shutdown abort a stream still sends its sequences'
    // last chunks (finish_reason "abort"); after the client went away nothing.
    enum class AbortReason { ClientGone, Shutdown };
    virtual void abort(AbortReason why) = 0;
  };
  struct Call;           // one generation request in flight (openai_server.cpp)
  struct EmbeddingCall;  // one /v1/embeddings request in flight (openai_server_embeddings.cpp)

 private:
  HttpResponse route(const HttpRequest& req, std::chrono::steady_clock::time_point arrived,
                     const std::shared_ptr<ResponseSink>& sink, const Tenant* tenant,
                     bool* deferred);
  // `body` is the request's JSON (parse_body, or an adapter's translation).
  void start_generation(Endpoint endpoint, const HttpRequest& req,
                        std::chrono::steady_clock::time_point arrived, nlohmann::ordered_json body,
                        const std::shared_ptr<ResponseSink>& sink, const Tenant* tenant);
  nlohmann::ordered_json parse_body(const HttpRequest& req) const;  // JSON, bounded
  HttpResponse models() const;
  HttpResponse model(const std::string& id) const;
  HttpResponse tokenize(const HttpRequest& req) const;
  HttpResponse detokenize(const HttpRequest& req) const;
  HttpResponse tokenizer_info() const;
  HttpResponse ready();
  void monitor_loop();
  void refresh_engine_metrics();
  void start_embeddings(const HttpRequest& req, const std::shared_ptr<ResponseSink>& sink,
                        const Tenant* tenant);
  void finished(Exchange* call);
  // Counts `call` in flight, aborts it when its client goes, and submits its
  // engine requests 0..n-1 (make(i) builds request i; its events go to
  // call->on_event(i, e)). A request the engine refuses fails the exchange
  // with a 400 naming `param` and aborts the others; submitting stops once
  // the exchange has an error. The call answers when every submitted request
  // is done. Defined in openai_server_submit.h.
  template <class CallT, class Make>
  void submit_all(const std::shared_ptr<CallT>& call, const std::shared_ptr<ResponseSink>& sink, size_t n,
                  const Make& make, const char* param);

  OpenAiServerConfig config_;
  GenerationService& service_;
  ModelContext model_;
  TenantRegistry tenants_;
  RequestFilter filter_;
  TenantLimiter limiter_;
  Metrics metrics_;
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_id_{1};
  std::atomic<uint64_t> finished_since_trim_{0};
  const std::string id_prefix_;

  mutable std::mutex calls_mu_;
  std::set<std::shared_ptr<Exchange>> calls_;

  std::chrono::steady_clock::time_point watchdog_now() const;

  // A generation request's engine outcome: a token (the engine works) or an
  // internal engine error (a failed step). Any thread.
  void engine_outcome(bool failed, const std::string& error);

  std::mutex watchdog_mu_;  // guards the watchdog and the outcomes below
  EngineWatchdog watchdog_;
  std::optional<std::chrono::steady_clock::time_point> last_engine_failure_;
  std::string last_engine_error_;
  std::atomic<bool> engine_failing_{false};  // the last outcome was a failure

  std::mutex monitor_mu_;
  std::condition_variable monitor_cv_;
  bool stop_monitor_ = false;
  std::thread monitor_;
};

}  // namespace loom::server
