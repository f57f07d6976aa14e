// Routes, authentication, admission (filter, tenant limits, drain) and the
// life of one generation request: submit one engine request per prompt, turn
// events into SSE chunks or one body, abort when the client goes away, then
// record metrics and one access-log line.
#include "server/openai_server.h"
#include "server/openai_server_submit.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <random>

#include "core/error.h"
#include "server/anthropic_api.h"
#include "server/api_error.h"
#include "server/heap_trim.h"
#include "server/json_body.h"
#include "server/process_metrics.h"
#include "server/response_builder.h"
#include "server/responses_api.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace loom::server {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

namespace {

double seconds_since(SteadyClock::time_point t, SteadyClock::time_point now = SteadyClock::now()) {
  return std::chrono::duration<double>(now - t).count();
}

HttpResponse json_response(int status, const json& body) {
  return {status, "application/json", body.dump(-1, ' ', false, json::error_handler_t::replace), {}};
}

HttpResponse error_response(const ApiError& e) {
  HttpResponse r{e.status(), "application/json", error_body(e), {}};
  if (e.retry_after() > 0) r.headers.emplace_back("Retry-After", std::to_string(e.retry_after()));
  if (e.status() == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");  // RFC 6750
  return r;
}

const std::vector<double> kLatencyBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                             0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0,
                                             20.0,  40.0,  80.0, 160.0, 640.0};

// Host work per request (parsing, detokenisation, delivery): 10 us to 1 s.
const std::vector<double> kStageBuckets = {1e-5,  2.5e-5, 5e-5,  1e-4, 2.5e-4, 5e-4, 0.001, 0.0025,
                                           0.005, 0.01,   0.025, 0.05, 0.1,    0.25, 0.5,   1.0};

// Routes whose requests run in the engine (counted per tenant).
bool is_engine_route(const std::string& path) {
  return path == "/v1/completions" || path == "/v1/chat/completions" || path == "/v1/messages" ||
         path == "/v1/responses" || path == "/v1/embeddings";
}

// The request's output constraint, compiled (null: unconstrained). Grammar
// errors become a 400 naming the field (503 when the compile queue is full).
std::shared_ptr<const TokenConstraintFactory> output_constraint(
    const GenerationRequest& g, const ModelContext& model, structured::GrammarCompiler* grammars) {
  const auto grammar =
      output_grammar(g.structure, model.tool_format, g.reasoning, g.reasoning_started);
  if (!grammar) return nullptr;
  const std::string param = g.structure.tools.forced() ? "tool_choice" : g.structure.param;
  if (!grammars)
    throw ApiError(400, "structured output is not enabled on this server", param);
  try {
    return grammars->compile(*grammar);
  } catch (const structured::GrammarError& e) {
    if (e.kind() == structured::GrammarError::Kind::Busy)
      throw ApiError(503, e.what(), param, "service_unavailable").with_retry_after(1);
    throw ApiError(400, fmt::format("{}: {}", param, e.what()), param);
  }
}

std::string random_prefix() {
  std::random_device rd;
  return fmt::format("{:08x}", rd());
}

}  // namespace

// ---------------------------------------------------------------------------
// One generation request in flight.
struct OpenAiServer::Call : OpenAiServer::Exchange {
  OpenAiServer& server;
  std::shared_ptr<ResponseSink> sink;
  GenerationRequest request;
  ResponseBuilder builder;
  const Tenant* tenant;
  std::string route;
  std::string remote;
  SteadyClock::time_point arrived;

  std::mutex mu;
  std::vector<RequestId> engine_ids;   // by prompt; 0 until submitted
  size_t submitted = 0;
  size_t done = 0;
  bool all_submitted = false;
  bool aborted = false;                // client gone or shutdown
  bool client_gone = false;            // nobody to send to any more
  bool headers_sent = false;
  bool finished = false;
  std::optional<ApiError> error;       // the first engine error
  std::optional<SteadyClock::time_point> first_token;
  bool queue_time_recorded = false;
  std::vector<SteadyClock::time_point> last_token;  // by choice
  std::optional<SteadyClock::time_point> last_any_token;  // the call's last token, any choice
  double detokenize_s = 0;           // the engine's detokenisation, over the call's prompts
  double deliver_s = 0;              // this server's formatting and writing of the call's events
  int64_t spec_draft_tokens = 0;     // speculative decoding, over the call's prompts
  int64_t spec_accepted_tokens = 0;

  Call(OpenAiServer& s, std::shared_ptr<ResponseSink> k, GenerationRequest r, const Tenant* t,
       std::string route_, std::string remote_, SteadyClock::time_point arrived_, std::string id,
       int64_t created)
      : server(s),
        sink(std::move(k)),
        request(std::move(r)),
        builder(request, *s.model_.tokenizer, std::move(id), created),
        tenant(t),
        route(std::move(route_)),
        remote(std::move(remote_)),
        arrived(arrived_) {
    engine_ids.assign(request.prompts.size(), 0);
    last_token.resize(size_t(request.num_choices()));
  }

  void send_sse(const std::string& payload) { sink->write("data: " + payload + "\n\n"); }

  // Engine thread.
  void on_event(size_t prompt_index, const StreamEvent& e) {
    if (e.error == EngineErrorKind::Internal) {
      server.metrics_.inc("loom_engine_errors_total");
      server.engine_outcome(true, e.error_message);
    } else if (!e.token_ids.empty() && server.engine_failing_.load()) {
      server.engine_outcome(false, "");  // a step worked again
    }
    std::unique_lock<std::mutex> lk(mu);
    if (e.error != EngineErrorKind::None && !error) {
      error = engine_error(e);
      for (size_t i = 0; i < engine_ids.size(); ++i)  // the others cannot succeed now
        if (i != prompt_index && engine_ids[i] != 0) server.service_.abort(engine_ids[i]);
    }
    if (e.first_scheduled && !queue_time_recorded) {  // the call's first prompt scheduled
      queue_time_recorded = true;
      server.metrics_.observe("loom_request_queue_time_seconds",
                              std::max(0.0, seconds_since(arrived, *e.first_scheduled)));
    }
    if (!e.token_ids.empty()) {
      const auto now = SteadyClock::now();
      if (!first_token) {
        first_token = now;
        server.metrics_.observe("loom_time_to_first_token_seconds", seconds_since(arrived, now));
        if (e.first_scheduled)
          server.metrics_.observe("loom_request_prefill_seconds",
                                  std::max(0.0, seconds_since(*e.first_scheduled, now)));
      }
      last_any_token = now;
      const size_t choice = prompt_index * size_t(request.params.n) + size_t(e.seq_index);
      if (choice < last_token.size()) {
        if (last_token[choice] != SteadyClock::time_point{})
          server.metrics_.observe("loom_inter_token_latency_seconds",
                                  seconds_since(last_token[choice], now));
        last_token[choice] = now;
      }
    }
    const auto deliver_start = SteadyClock::now();
    auto chunks = builder.on_event(int32_t(prompt_index), e);
    if (request.stream && !error && !client_gone) {
      if (!chunks.empty() && !headers_sent) {
        sink->begin_stream(200, "text/event-stream", {});
        headers_sent = true;
      }
      for (const auto& c : chunks) send_sse(c);
    }
    deliver_s += seconds_since(deliver_start);
    if (e.request_done) {
      ++done;
      detokenize_s += e.detokenize_seconds;
      spec_draft_tokens += e.spec_draft_tokens;
      spec_accepted_tokens += e.spec_accepted_tokens;
    }
    maybe_finish(lk);
  }

  static ApiError engine_error(const StreamEvent& e) {
    switch (e.error) {
      case EngineErrorKind::QueueFull:
        return ApiError(503, "the server is at capacity: " + e.error_message, "",
                        "service_unavailable")
            .with_retry_after(1);
      case EngineErrorKind::Shutdown:
        return ApiError(503, "the server is shutting down", "", "service_unavailable")
            .with_retry_after(1);
      case EngineErrorKind::TooLong: return ApiError(400, e.error_message, "max_tokens");
      case EngineErrorKind::Invalid: return ApiError(400, e.error_message);
      default: return ApiError(500, e.error_message.empty() ? "internal error" : e.error_message,
                               "", "server_error");
    }
  }

  // Abort everything submitted (see Exchange::abort).
  void abort(AbortReason why) override {
    std::lock_guard<std::mutex> lk(mu);
    if (finished) return;
    if (why == AbortReason::ClientGone) client_gone = true;
    if (aborted) return;
    aborted = true;
    for (RequestId id : engine_ids)
      if (id != 0) server.service_.abort(id);
  }

  // mu held. Ends the exchange once every submitted prompt is done.
  void maybe_finish(std::unique_lock<std::mutex>& lk) {
    if (finished || !all_submitted || done < submitted) return;
    finished = true;
    // Free the tenant's slot before the last bytes go out, so a client that
    // sends its next request as soon as this one ends is not refused.
    if (tenant) server.limiter_.release(*tenant, builder.usage().completion_tokens);
    int status = 200;
    const auto deliver_start = SteadyClock::now();
    if (error) {
      status = error->status();
      if (!headers_sent) {
        sink->send(error_response(*error));
      } else {
        send_sse(error_body(*error));
        send_sse("[DONE]");
        sink->end_stream();
      }
    } else if (request.stream) {
      if (!headers_sent) sink->begin_stream(200, "text/event-stream", {});
      if (request.include_usage) send_sse(builder.usage_chunk());
      send_sse("[DONE]");
      sink->end_stream();
    } else {
      sink->send(HttpResponse{200, "application/json", builder.final_body(), {}});
    }
    deliver_s += seconds_since(deliver_start);
    if (client_gone && !error) status = 499;  // client closed the request (nginx's code)
    lk.unlock();
    record(status);
    server.finished(this);
  }

  void record(int status) {
    const auto now = SteadyClock::now();
    const Usage u = builder.usage();
    Metrics& m = server.metrics_;
    const std::string st = std::to_string(status);
    const std::string tenant_name = tenant ? tenant->name : "";
    m.inc("loom_requests_total", {{"route", route}, {"status", st}});
    m.inc("loom_tenant_requests_total", {{"tenant", tenant_name}, {"status", st}});
    m.inc("loom_prompt_tokens_total", {}, double(u.prompt_tokens));
    m.inc("loom_generation_tokens_total", {}, double(u.completion_tokens));
    m.inc("loom_tenant_tokens_total", {{"tenant", tenant_name}, {"kind", "prompt"}},
          double(u.prompt_tokens));
    m.inc("loom_tenant_tokens_total", {{"tenant", tenant_name}, {"kind", "generation"}},
          double(u.completion_tokens));
    const double e2e = seconds_since(arrived, now);
    double ttft = -1;
    if (status == 200) {
      m.observe("loom_e2e_request_latency_seconds", e2e);
      if (first_token) {
        ttft = seconds_since(arrived, *first_token);
        const int64_t per_choice = u.completion_tokens / std::max(1, request.num_choices());
        if (per_choice > 1)
          m.observe("loom_time_per_output_token_seconds",
                    seconds_since(*first_token, now) / double(per_choice - 1));
        m.observe("loom_request_decode_seconds", seconds_since(*first_token, *last_any_token));
      }
      m.observe("loom_request_detokenize_seconds", detokenize_s);
      m.observe("loom_request_deliver_seconds", deliver_s);
    }
    if (!server.config_.log_requests) return;
    spdlog::info(
        "access id={} tenant={} route={} status={} stream={} n={} prompt_tokens={} "
        "completion_tokens={} ttft_ms={:.1f} e2e_ms={:.1f} spec_draft={} spec_accepted={} remote={}",
        builder.id(), tenant_name.empty() ? "-" : tenant_name, route, status, request.stream,
        request.params.n, u.prompt_tokens, u.completion_tokens, ttft * 1e3, e2e * 1e3,
        spec_draft_tokens, spec_accepted_tokens, remote.empty() ? "-" : remote);
  }
};

// ---------------------------------------------------------------------------

OpenAiServer::OpenAiServer(OpenAiServerConfig config, GenerationService& service,
                           ModelContext model, TenantRegistry tenants, RequestFilter filter)
    : config_(std::move(config)),
      service_(service),
      model_(std::move(model)),
      tenants_(std::move(tenants)),
      filter_(std::move(filter)),
      id_prefix_(random_prefix()),
      watchdog_(config_.watchdog, watchdog_now()) {
  LOOM_CHECK(model_.tokenizer != nullptr, "the server needs the model's tokenizer");
  auto& m = metrics_;
  m.declare_counter("loom_requests_total", "HTTP requests by route and status");
  m.declare_counter("loom_tenant_requests_total", "generation requests by tenant and status");
  m.declare_counter("loom_tenant_tokens_total", "tokens by tenant and kind (prompt, generation)");
  m.declare_counter("loom_prompt_tokens_total", "prompt tokens of finished requests");
  m.declare_counter("loom_generation_tokens_total", "generated tokens of finished requests");
  m.declare_counter("loom_filtered_requests_total", "requests denied by a filter rule");
  m.declare_counter("loom_rate_limited_requests_total", "requests refused by a tenant limit");
  m.declare_histogram("loom_time_to_first_token_seconds", "arrival to first generated token",
                      kLatencyBuckets);
  m.declare_histogram("loom_time_per_output_token_seconds",
                      "mean time per generated token after the first", kLatencyBuckets);
  m.declare_histogram("loom_inter_token_latency_seconds", "time between tokens of one sequence",
                      kLatencyBuckets);
  m.declare_histogram("loom_e2e_request_latency_seconds", "arrival to last byte (status 200)",
                      kLatencyBuckets);
  m.declare_histogram("loom_request_queue_time_seconds",
                      "arrival to the engine first scheduling the request", kLatencyBuckets);
  // A request's stages: prepare for every request submitted to the engine,
  // prefill at its first token, the others when it ends with status 200 (the
  // whole: loom_e2e_request_latency_seconds; the wait: ..._queue_time_seconds).
  m.declare_histogram("loom_request_prepare_seconds",
                      "arrival to submission to the engine: JSON parsing, chat template, "
                      "tokenisation, grammar compile",
                      kStageBuckets);
  m.declare_histogram("loom_request_prefill_seconds",
                      "the engine first scheduling the request to its first token",
                      kLatencyBuckets);
  m.declare_histogram("loom_request_decode_seconds", "first token to last token", kLatencyBuckets);
  m.declare_histogram("loom_request_detokenize_seconds",
                      "engine host time turning the request's tokens into text (detokenisation, "
                      "stop strings)",
                      kStageBuckets);
  m.declare_histogram("loom_request_deliver_seconds",
                      "server host time formatting and writing the request's events (chunks, "
                      "final body)",
                      kStageBuckets);
  if (config_.gpu_metrics) declare_gpu_metrics(m);
  declare_process_metrics(m);
  if (config_.build_info.is_object()) {
    m.declare_gauge("loom_build_info", "1, labelled with the version and commit of this build");
    m.set("loom_build_info", 1.0,
          {{"version", config_.build_info.value("version", "")},
           {"commit", config_.build_info.value("commit", "")}});
  }
  m.declare_gauge("loom_http_requests_in_flight", "generation requests being served");
  m.declare_gauge("loom_num_requests_running", "sequences running in the engine");
  m.declare_gauge("loom_num_requests_waiting", "sequences waiting in the engine (queue depth)");
  m.declare_gauge("loom_kv_cache_usage_ratio", "used KV blocks / all KV blocks");
  m.declare_gauge("loom_kv_cache_used_blocks", "KV blocks in use");
  m.declare_gauge("loom_kv_cache_total_blocks", "KV blocks in the pool");
  m.declare_gauge("loom_prefix_cache_hit_rate", "prefix-cache hit tokens / queried tokens");
  m.declare_counter("loom_prefix_cache_queried_tokens_total", "prompt tokens looked up");
  m.declare_counter("loom_prefix_cache_hit_tokens_total", "prompt tokens found in the cache");
  m.declare_counter("loom_preemptions_total", "sequences preempted (recomputed later)");
  m.declare_counter("loom_engine_steps_total", "engine forward steps");
  m.declare_counter("loom_engine_errors_total",
                    "engine requests ended by an internal error (e.g. a failed step)");
  m.declare_counter("loom_engine_prompt_tokens_computed_total", "prompt tokens prefilled");
  m.declare_counter("loom_spec_decode_draft_tokens_total", "speculative decoding: draft tokens verified");
  m.declare_counter("loom_spec_decode_accepted_tokens_total",
                    "speculative decoding: draft tokens accepted");
  m.declare_counter(
      "loom_jump_forward_tokens_total",
      "jump-forward: a constraint's forced tokens verified (also in the spec_decode counters)");
  m.declare_counter("loom_jump_forward_accepted_tokens_total",
                    "jump-forward: forced tokens accepted");
  m.declare_counter("loom_spec_decode_acceptance_length_total",
                    "speculative decoding: verify steps by the number of draft tokens they accepted "
                    "(label accepted)");
  {
    std::vector<double> bounds;
    for (int i = 0; i < MaskTimeHistogram::kNumBounds; ++i)
      bounds.push_back(MaskTimeHistogram::bound_seconds(i));
    m.declare_histogram("loom_grammar_mask_seconds",
                        "host time to fill one constrained sequence's allowed-token mask for "
                        "one token",
                        std::move(bounds));
  }
  m.declare_counter("loom_grammar_compiles_total", "grammars compiled (cache misses)");
  m.declare_counter("loom_grammar_cache_hits_total", "grammar requests served from the cache");
  m.declare_counter("loom_grammar_compile_timeouts_total",
                    "grammar compiles over --max-grammar-compile-ms (400s)");
  m.declare_counter("loom_grammar_compiles_interrupted_total",
                    "grammar compiles stopped at --max-grammar-compile-ms, their thread freed");
  m.declare_counter("loom_engine_masked_rows_total", "logits rows restricted by a grammar");
  m.declare_counter("loom_heap_trims_total",
                    "times freed heap memory was given back to the kernel (malloc_trim)");
  m.declare_gauge("loom_engine_stalled", "1 when the engine has work but made no step "
                                         "within the watchdog window");
  refresh_engine_metrics();
  monitor_ = std::thread([this] { monitor_loop(); });
}

OpenAiServer::~OpenAiServer() {
  {
    std::lock_guard<std::mutex> lk(monitor_mu_);
    stop_monitor_ = true;
  }
  monitor_cv_.notify_all();
  monitor_.join();
}

size_t OpenAiServer::in_flight() const {
  std::lock_guard<std::mutex> lk(calls_mu_);
  return calls_.size();
}

DrainHooks OpenAiServer::drain_hooks() {
  DrainHooks h;
  h.begin = [this] { draining_ = true; };
  h.in_flight = [this] { return in_flight(); };
  h.abort_all = [this] {
    std::vector<std::shared_ptr<Exchange>> calls;
    {
      std::lock_guard<std::mutex> lk(calls_mu_);
      calls.assign(calls_.begin(), calls_.end());
    }
    for (auto& c : calls) c->abort(Exchange::AbortReason::Shutdown);
  };
  return h;
}

void OpenAiServer::finished(Exchange* call) {
  std::lock_guard<std::mutex> lk(calls_mu_);
  for (auto it = calls_.begin(); it != calls_.end(); ++it)
    if (it->get() == call) {
      calls_.erase(it);
      break;
    }
  metrics_.set("loom_http_requests_in_flight", double(calls_.size()));
  finished_since_trim_.fetch_add(1, std::memory_order_relaxed);
}

void OpenAiServer::monitor_loop() {
  std::unique_lock<std::mutex> lk(monitor_mu_);
  auto last_trim = SteadyClock::now();
  while (!stop_monitor_) {
    monitor_cv_.wait_for(lk, config_.stats_interval);
    if (stop_monitor_) break;
    lk.unlock();
    refresh_engine_metrics();
    const auto now = SteadyClock::now();
    if (config_.heap_trim_interval.count() > 0 && now - last_trim >= config_.heap_trim_interval &&
        finished_since_trim_.exchange(0, std::memory_order_relaxed) > 0) {
      last_trim = now;
      trim_heap();
      metrics_.inc("loom_heap_trims_total");
    }
    lk.lock();
  }
}

SteadyClock::time_point OpenAiServer::watchdog_now() const {
  return config_.watchdog_clock ? config_.watchdog_clock() : SteadyClock::now();
}

void OpenAiServer::refresh_engine_metrics() {
  const EngineStats s = service_.stats();
  const auto now = watchdog_now();
  EngineWatchdog::Activity activity;
  activity.steps = s.steps;
  activity.busy = s.running + s.waiting > 0 || s.step_in_progress || in_flight() > 0;
  if (s.step_in_progress) activity.step_started = s.step_started;
  bool stalled;
  {
    std::lock_guard<std::mutex> lk(watchdog_mu_);
    watchdog_.observe(activity, now);
    stalled = watchdog_.stalled(now);
  }
  if (config_.gpu_metrics) record_gpu_metrics(metrics_, config_.gpu_metrics->sample());
  record_process_metrics(metrics_, sample_process());
  auto& m = metrics_;
  m.set("loom_num_requests_running", double(s.running));
  m.set("loom_num_requests_waiting", double(s.waiting));
  m.set("loom_kv_cache_used_blocks", double(s.kv.used_blocks));
  m.set("loom_kv_cache_total_blocks", double(s.kv.num_blocks));
  m.set("loom_kv_cache_usage_ratio",
        s.kv.num_blocks > 0 ? double(s.kv.used_blocks) / double(s.kv.num_blocks) : 0.0);
  m.set("loom_prefix_cache_hit_rate", s.kv.prefix_hit_rate());
  m.set("loom_prefix_cache_queried_tokens_total", double(s.kv.prefix_queried_tokens));
  m.set("loom_prefix_cache_hit_tokens_total", double(s.kv.prefix_hit_tokens));
  m.set("loom_preemptions_total", double(s.preemptions));
  m.set("loom_engine_steps_total", double(s.steps));
  m.set("loom_engine_prompt_tokens_computed_total", double(s.prompt_tokens_computed));
  m.set("loom_spec_decode_draft_tokens_total", double(s.spec_draft_tokens));
  m.set("loom_spec_decode_accepted_tokens_total", double(s.spec_accepted_tokens));
  m.set("loom_jump_forward_tokens_total", double(s.jump_forward_tokens));
  m.set("loom_jump_forward_accepted_tokens_total", double(s.jump_forward_accepted_tokens));
  for (size_t a = 0; a < s.spec_accepted_lengths.size(); ++a)
    m.set("loom_spec_decode_acceptance_length_total", double(s.spec_accepted_lengths[a]),
          {{"accepted", std::to_string(a)}});
  m.set_histogram("loom_grammar_mask_seconds", s.mask_time.counts, s.mask_time.sum_seconds,
                  s.mask_time.count);
  m.set("loom_engine_masked_rows_total", double(s.masked_rows));
  if (config_.grammars) {
    const structured::CompilerStats g = config_.grammars->stats();
    m.set("loom_grammar_compiles_total", double(g.compiles));
    m.set("loom_grammar_cache_hits_total", double(g.cache_hits));
    m.set("loom_grammar_compile_timeouts_total", double(g.timeouts));
    m.set("loom_grammar_compiles_interrupted_total", double(g.interrupted));
  }
  m.set("loom_engine_stalled", stalled ? 1.0 : 0.0);
}

HttpResponse OpenAiServer::ready() {
  refresh_engine_metrics();
  if (draining_) return json_response(503, {{"status", "shutting down"}});
  const auto now = watchdog_now();
  std::lock_guard<std::mutex> lk(watchdog_mu_);
  if (watchdog_.stalled(now))
    return json_response(503,
                         {{"status", "stalled"},
                          {"seconds_since_progress",
                           std::chrono::duration<double>(watchdog_.since_progress(now)).count()}});
  // The last engine outcome was a failed step, and recent: not ready until a
  // step succeeds or a watchdog window passes without another failure.
  if (engine_failing_ && last_engine_failure_ && now - *last_engine_failure_ <= config_.watchdog)
    return json_response(503, {{"status", "engine failing"}, {"error", last_engine_error_}});
  return json_response(200, {{"status", "ready"}});
}

void OpenAiServer::engine_outcome(bool failed, const std::string& error) {
  const auto now = watchdog_now();
  std::lock_guard<std::mutex> lk(watchdog_mu_);
  engine_failing_ = failed;
  if (failed) {
    last_engine_failure_ = now;
    last_engine_error_ = error;
  }
}

void OpenAiServer::handle(HttpRequest req, std::shared_ptr<ResponseSink> sink) {
  const auto arrived = SteadyClock::now();
  const std::string path = req.path();
  HttpResponse resp;
  bool deferred = false;
  const Tenant* tenant = nullptr;
  // Routes of other APIs answer in their own format, errors included.
  if (path == "/v1/messages")
    sink = make_anthropic_adapter(std::move(sink));
  else if (path == "/v1/responses")
    sink = make_responses_adapter(std::move(sink));
  try {
    const bool open_route = path == "/health" || path == "/ready" || path == "/version" ||
                            (path == "/metrics" && config_.metrics_public);
    if (tenants_.enabled() && !open_route) {
      // Anthropic's clients send the key as x-api-key.
      std::string auth = req.header("authorization");
      if (auth.empty() && !req.header("x-api-key").empty())
        auth = "Bearer " + req.header("x-api-key");
      tenant = tenants_.authenticate(auth);
      if (!tenant) {
        if (auth.empty())
          throw ApiError(
              401, "missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'", "",
              "authentication_error");
        if (auth.size() < 7 ||
            !std::equal(auth.begin(), auth.begin() + 7, "bearer ", [](char a, char b) {
              return std::tolower(static_cast<unsigned char>(a)) == b;
            }))
          throw ApiError(401, "the Authorization header must be 'Bearer <key>'", "",
                         "authentication_error");
        throw ApiError(401, "invalid API key", "", "authentication_error");
      }
    }
    resp = route(req, arrived, sink, tenant, &deferred);
  } catch (const ApiError& e) {
    resp = error_response(e);
  } catch (const loom::Error& e) {
    resp = error_response(ApiError(400, e.what()));
  } catch (const std::exception& e) {
    spdlog::error("request {} {} failed: {}", req.method, path, e.what());
    resp = error_response(ApiError(500, "internal error", "", "server_error"));
  }
  if (deferred) return;  // a generation call answers and logs on its own
  const bool known = path == "/health" || path == "/ready" || path == "/metrics" ||
                     path == "/version" || path == "/v1/models" || path == "/tokenize" ||
                     path == "/detokenize" || path == "/tokenizer_info" ||
                     path == "/debug/step_profile" || is_engine_route(path);
  const std::string route_label = known                               ? path
                                  : path.rfind("/v1/models/", 0) == 0 ? "/v1/models/{id}"
                                                                      : "other";
  metrics_.inc("loom_requests_total", {{"route", route_label}, {"status", std::to_string(resp.status)}});
  if (path != "/health" && path != "/metrics" && path != "/ready" && config_.log_requests)
    spdlog::info("access route={} method={} status={} tenant={} e2e_ms={:.1f} remote={}",
                 route_label, req.method, resp.status, tenant ? tenant->name : "-",
                 seconds_since(arrived) * 1e3, req.remote.empty() ? "-" : req.remote);
  if (is_engine_route(path) && tenant)
    metrics_.inc("loom_tenant_requests_total",
                 {{"tenant", tenant->name}, {"status", std::to_string(resp.status)}});
  sink->send(std::move(resp));
}

HttpResponse OpenAiServer::route(const HttpRequest& req, SteadyClock::time_point arrived,
                                 const std::shared_ptr<ResponseSink>& sink, const Tenant* tenant,
                                 bool* deferred) {
  const std::string path = req.path();
  auto need = [&](const char* method) {
    if (req.method != method)
      throw ApiError(405, fmt::format("{} needs {}", path, method));
  };
  if (path == "/health") {
    need("GET");
    return json_response(200, {{"status", "ok"}});
  }
  if (path == "/ready") {
    need("GET");
    return ready();
  }
  if (path == "/metrics") {
    need("GET");
    refresh_engine_metrics();
    return {200, "text/plain; version=0.0.4; charset=utf-8", metrics_.render(), {}};
  }
  if (path == "/v1/models") {
    need("GET");
    return models();
  }
  if (path.rfind("/v1/models/", 0) == 0) {
    need("GET");
    return model(path.substr(std::string("/v1/models/").size()));
  }
  if (path == "/version" && config_.build_info.is_object()) {
    need("GET");
    return json_response(200, config_.build_info);
  }
  if (path == "/tokenize") {
    need("POST");
    return tokenize(req);
  }
  if (path == "/detokenize") {
    need("POST");
    return detokenize(req);
  }
  if (path == "/tokenizer_info") {
    need("GET");
    return tokenizer_info();
  }
  if (path == "/debug/step_profile") {
    need("GET");
    const EngineStats s = service_.stats();
    if (!s.profile.enabled)
      throw ApiError(404, "the step profile is off: start loom serve with --profile-steps", "",
                     "not_found_error");
    return json_response(200, to_json(s.profile));
  }
  if (path == "/v1/messages" || path == "/v1/responses") {
    need("POST");
    // Translated into a chat completions request; the adapter (the sink,
    // set in handle()) turns the chat answer back into the route's own.
    auto adapter = std::dynamic_pointer_cast<ChatAdapter>(sink);
    LOOM_CHECK(adapter != nullptr, "{} without its adapter", path);
    start_generation(Endpoint::ChatCompletions, req, arrived,
                     adapter->translate(parse_body(req), model_, config_.limits), sink, tenant);
    *deferred = true;
    return {};
  }
  if (path == "/v1/embeddings") {
    need("POST");
    start_embeddings(req, sink, tenant);
    *deferred = true;
    return {};
  }
  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    need("POST");
    start_generation(path == "/v1/completions" ? Endpoint::Completions : Endpoint::ChatCompletions,
                     req, arrived, parse_body(req), sink, tenant);
    *deferred = true;
    return {};
  }
  throw ApiError(404, fmt::format("no route {} {}", req.method, path.substr(0, 200)), "",
                 "not_found_error");
}

nlohmann::ordered_json OpenAiServer::parse_body(const HttpRequest& req) const {
  const auto& lim = config_.limits;
  return parse_json_body(req.body, lim.max_body_bytes, lim.max_json_depth,
                         SteadyClock::now() + config_.parse_timeout);
}

bool OpenAiServer::runs_inline(const HttpRequest& req) {
  const std::string path = req.path();
  return req.method == "GET" && (path == "/health" || path == "/ready");
}

namespace {

json model_card(const std::string& id, int32_t max_model_len) {
  return {{"id", id},
          {"object", "model"},
          {"created", 0},
          {"owned_by", "loom"},
          {"max_model_len", max_model_len}};
}

}  // namespace

HttpResponse OpenAiServer::models() const {
  json data = json::array();
  for (const auto& id : model_.served_names()) data.push_back(model_card(id, model_.max_model_len));
  return json_response(200, {{"object", "list"}, {"data", data}});
}

HttpResponse OpenAiServer::model(const std::string& id) const {
  for (const auto& name : model_.served_names())
    if (name == id) return json_response(200, model_card(id, model_.max_model_len));
  throw ApiError(404, fmt::format("The model '{}' does not exist", id.substr(0, 256)), "model",
                 "not_found_error");
}

HttpResponse OpenAiServer::tokenize(const HttpRequest& req) const {
  const auto& lim = config_.limits;
  const nlohmann::ordered_json body = parse_body(req);
  std::string text;
  bool add_special = true;
  if (body.contains("messages") && !body["messages"].is_null()) {
    GenerationRequest g = parse_generation_request(
        Endpoint::ChatCompletions,
        nlohmann::ordered_json{{"messages", body["messages"]}, {"max_tokens", 1}}, model_, lim);
    return json_response(200, {{"count", g.prompts[0].size()},
                               {"max_model_len", model_.max_model_len},
                               {"tokens", g.prompts[0]}});
  }
  if (!body.contains("prompt") || !body["prompt"].is_string())
    throw_bad_field("prompt", "'prompt' must be a string (or send 'messages')");
  text = body["prompt"].get<std::string>();
  if (body.contains("add_special_tokens") && !body["add_special_tokens"].is_null()) {
    if (!body["add_special_tokens"].is_boolean())
      throw_bad_field("add_special_tokens", "'add_special_tokens' must be a boolean");
    add_special = body["add_special_tokens"].get<bool>();
  }
  const auto ids = model_.tokenizer->encode(text, add_special, true);
  return json_response(200, {{"count", ids.size()},
                             {"max_model_len", model_.max_model_len},
                             {"tokens", ids}});
}

HttpResponse OpenAiServer::detokenize(const HttpRequest& req) const {
  const nlohmann::ordered_json body = parse_body(req);
  if (!body.contains("tokens") || !body["tokens"].is_array())
    throw_bad_field("tokens", "'tokens' must be a list of token ids");
  std::vector<int32_t> ids;
  for (const auto& t : body["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= model_.vocab_size)
      throw_bad_field("tokens", fmt::format("token ids must be integers in [0, {})", model_.vocab_size));
    ids.push_back(int32_t(t.get<int64_t>()));
  }
  return json_response(200, {{"prompt", model_.tokenizer->decode(ids, true)}});
}

HttpResponse OpenAiServer::tokenizer_info() const {
  // vLLM's shape (tokenizer_config.json's fields), so clients that tokenise
  // through the server (lm-evaluation-harness's remote tokenizer) find the
  // special tokens; /tokenize with add_special_tokens false gives their ids.
  const Tokenizer& tok = *model_.tokenizer;
  auto token = [&](const std::optional<int32_t>& id) -> json {
    if (!id) return nullptr;
    return std::string(tok.token_text(*id));
  };
  const SpecialTokens& special = tok.special();
  json info = {{"tokenizer_class", "loom"},
               {"bos_token", token(special.bos)},
               {"eos_token", token(special.eos)},
               {"pad_token", token(special.pad)},
               {"add_bos_token", special.add_bos},
               {"add_eos_token", special.add_eos},
               {"model_max_length", model_.max_model_len},
               {"vocab_size", model_.vocab_size}};
  info["chat_template"] = model_.chat ? json(model_.chat->source()) : json(nullptr);
  return json_response(200, info);
}

void OpenAiServer::start_generation(Endpoint endpoint, const HttpRequest& req,
                                    SteadyClock::time_point arrived, nlohmann::ordered_json body,
                                    const std::shared_ptr<ResponseSink>& sink,
                                    const Tenant* tenant) {
  const auto& lim = config_.limits;
  GenerationRequest g = parse_generation_request(endpoint, std::move(body), model_, lim);
  const char* prompt_param = endpoint == Endpoint::ChatCompletions ? "messages" : "prompt";
  for (const auto& text : g.prompt_texts)
    if (auto rule = filter_.check(text)) {
      metrics_.inc("loom_filtered_requests_total", {{"rule", *rule}});
      throw ApiError(400, fmt::format("the request was denied by the content filter (rule '{}')",
                                      *rule),
                     prompt_param);
    }
  if (tenant && tenant->limits.max_prompt_tokens > 0)
    for (const auto& p : g.prompts)
      if (int64_t(p.size()) > tenant->limits.max_prompt_tokens) {
        metrics_.inc("loom_filtered_requests_total", {{"rule", "max_prompt_tokens"}});
        throw ApiError(400, fmt::format("the prompt has {} tokens; tenant '{}' is limited to {}",
                                        p.size(), tenant->name, tenant->limits.max_prompt_tokens),
                       prompt_param);
      }
  // Before admission: a bad or slow grammar holds no tenant slot.
  const auto constraint = output_constraint(g, model_, config_.grammars.get());
  if (draining_)
    throw ApiError(503, "the server is shutting down", "", "service_unavailable")
        .with_retry_after(config_.retry_after_seconds);
  if (tenant) {
    const RateLimitDecision d = limiter_.try_admit(*tenant, g.prompt_tokens());
    if (!d.admitted) {
      metrics_.inc("loom_rate_limited_requests_total",
                   {{"tenant", tenant->name}, {"reason", d.reason}});
      throw ApiError(429, fmt::format("tenant '{}' is over its {} limit", tenant->name, d.reason),
                     "", "rate_limit_error")
          .with_retry_after(d.retry_after_seconds);
    }
  }

  const bool chat = endpoint == Endpoint::ChatCompletions;
  const std::string id = fmt::format("{}-{}{:x}", chat ? "chatcmpl" : "cmpl", id_prefix_, next_id_++);
  const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  auto call = std::make_shared<Call>(*this, sink, std::move(g), tenant, req.path(), req.remote,
                                     arrived, id, created);
  metrics_.observe("loom_request_prepare_seconds", seconds_since(arrived));
  const GenerationRequest& r = call->request;
  submit_all(
      call, sink, r.prompts.size(),
      [&](size_t i) {
        Request er;
        er.external_id = id;
        er.prompt_ids = r.prompts[i];
        er.params = r.params;
        er.priority = r.priority;
        er.cache_salt = tenant ? tenant->name : "";
        er.tenant = tenant ? tenant->name : "";
        er.tenant_weight = tenant ? tenant->weight : 1.0f;
        er.constraint = constraint;
        return er;
      },
      "");
}

}  // namespace loom::server
