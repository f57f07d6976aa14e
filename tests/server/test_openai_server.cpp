// OpenAiServer over a fake GenerationService, without HTTP: the /ready
// watchdog (EngineWatchdog with a hand-stepped clock), the queue-time
// histogram, the tenant and weight handed to the engine, and GPU metrics
// from a fake source (present) and from NVML where the library is missing.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "server/engine_watchdog.h"
#include "server/gpu_metrics.h"
#include "server/openai_server.h"
#include "tokenizer/tokenizer.h"

using namespace loom;
using namespace loom::server;
using nlohmann::json;
using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

namespace {

const Tokenizer& tokenizer() {
  static auto tok =
      load_tokenizer_hf(std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/tokenizer/qwen2");
  return *tok;
}

ModelContext model_ctx() {
  ModelContext m;
  m.name = "test-model";
  m.tokenizer = &tokenizer();
  m.max_model_len = 512;
  m.vocab_size = tokenizer().vocab_size();
  return m;
}

// Answers each request at once on the caller's thread: one token, then done.
// The event says the request was first scheduled `queue` after submission.
class FakeService : public GenerationService {
 public:
  RequestId submit(Request request, StreamCallback callback) override {
    const RequestId id = next_++;
    {
      std::lock_guard<std::mutex> lk(mu_);
      submitted_.push_back(request);
    }
    StreamEvent e;
    e.request_id = id;
    e.token_ids = {int32_t(request.prompt_ids.back())};
    e.text = "x";
    e.first_scheduled = SteadyClock::now() + queue;
    e.finish = FinishReason::Length;
    e.request_done = true;
    callback(e);
    return id;
  }
  void abort(RequestId) override {}
  EngineStats stats() const override {
    std::lock_guard<std::mutex> lk(mu_);
    return stats_;
  }
  void set_stats(uint64_t steps, size_t running, size_t waiting) {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.steps = steps;
    stats_.running = running;
    stats_.waiting = waiting;
  }
  std::vector<Request> submitted() const {
    std::lock_guard<std::mutex> lk(mu_);
    return submitted_;
  }
  SteadyClock::duration queue{milliseconds(300)};

 private:
  mutable std::mutex mu_;
  EngineStats stats_;
  std::vector<Request> submitted_;
  RequestId next_ = 1;
};

// Keeps every request without answering, and reports an engine that has
// published nothing since it was idle: what the server sees while the first
// step after idle runs (or hangs).
class HoldingService : public GenerationService {
 public:
  RequestId submit(Request, StreamCallback callback) override {
    std::lock_guard<std::mutex> lk(mu_);
    callbacks_.push_back(std::move(callback));
    return RequestId(callbacks_.size());
  }
  void abort(RequestId) override {}
  EngineStats stats() const override { return {}; }
  std::vector<StreamCallback> take_callbacks() {
    std::lock_guard<std::mutex> lk(mu_);
    return std::exchange(callbacks_, {});
  }
  void finish_all() {
    std::vector<StreamCallback> cbs;
    {
      std::lock_guard<std::mutex> lk(mu_);
      cbs.swap(callbacks_);
    }
    for (size_t i = 0; i < cbs.size(); ++i) {
      StreamEvent e;
      e.request_id = RequestId(i + 1);
      e.finish = FinishReason::Abort;
      e.request_done = true;
      cbs[i](e);
    }
  }

 private:
  std::mutex mu_;
  std::vector<StreamCallback> callbacks_;
};

// Collects what the server sends.
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

HttpResponse call(OpenAiServer& server, const std::string& method, const std::string& path,
                  const std::string& body = "", const std::string& key = "") {
  HttpRequest req;
  req.method = method;
  req.target = path;
  req.body = body;
  if (!key.empty()) req.headers["authorization"] = "Bearer " + key;
  auto sink = std::make_shared<CaptureSink>();
  server.handle(std::move(req), sink);
  return sink->response();
}

// A clock the test moves by hand.
struct ManualClock {
  SteadyClock::time_point now = SteadyClock::time_point{} + std::chrono::hours(1);
  std::function<SteadyClock::time_point()> fn() {
    return [this] { return now; };
  }
};

}  // namespace

namespace {
EngineWatchdog::Activity activity(uint64_t steps, bool busy,
                                  std::optional<SteadyClock::time_point> step_started = {}) {
  return {steps, busy, step_started};
}
}  // namespace

TEST(EngineWatchdog, StallsOnlyWhenBusyWithoutSteps) {
  const auto t0 = SteadyClock::time_point{} + std::chrono::hours(1);
  EngineWatchdog w(milliseconds(100), t0);
  w.observe(activity(0, false), t0);
  EXPECT_FALSE(w.stalled(t0 + milliseconds(500)));       // idle for long: fine
  w.observe(activity(0, true), t0 + milliseconds(500));  // work arrives
  EXPECT_FALSE(w.stalled(t0 + milliseconds(600)));       // exactly the window
  EXPECT_TRUE(w.stalled(t0 + milliseconds(601)));
  EXPECT_EQ(w.since_progress(t0 + milliseconds(601)), milliseconds(101));
  w.observe(activity(1, true), t0 + milliseconds(700));  // a step: progress
  EXPECT_FALSE(w.stalled(t0 + milliseconds(800)));
  w.observe(activity(1, true), t0 + milliseconds(900));
  EXPECT_TRUE(w.stalled(t0 + milliseconds(900)));
  w.observe(activity(1, false), t0 + milliseconds(950));  // work gone (finished or aborted)
  EXPECT_FALSE(w.stalled(t0 + milliseconds(2000)));
}

// A step that begins is progress; one that then runs past the window is a
// stall although the step count never moves (the first step after idle).
TEST(EngineWatchdog, LongStepInProgress) {
  const auto t0 = SteadyClock::time_point{} + std::chrono::hours(1);
  const auto engine_clock = SteadyClock::time_point{} + std::chrono::hours(7);  // another clock
  EngineWatchdog w(milliseconds(100), t0);
  w.observe(activity(5, false), t0);
  w.observe(activity(5, true, engine_clock), t0 + milliseconds(1000));  // a step began
  EXPECT_FALSE(w.stalled(t0 + milliseconds(1100)));
  w.observe(activity(5, true, engine_clock), t0 + milliseconds(1101));  // the same step
  EXPECT_TRUE(w.stalled(t0 + milliseconds(1101)));
  w.observe(activity(6, true, engine_clock + milliseconds(1)), t0 + milliseconds(1200));
  EXPECT_FALSE(w.stalled(t0 + milliseconds(1250)));
}

TEST(OpenAiServer, ReadyFailsWhenTheEngineIsStuck) {
  FakeService service;
  ManualClock clock;
  OpenAiServerConfig config;
  config.watchdog = milliseconds(1000);
  config.stats_interval = milliseconds(3600 * 1000);  // only requests refresh
  config.watchdog_clock = clock.fn();
  OpenAiServer server(config, service, model_ctx());
  EXPECT_EQ(call(server, "GET", "/ready").status, 200);

  service.set_stats(10, 3, 5);  // busy
  clock.now += milliseconds(10);
  EXPECT_EQ(call(server, "GET", "/ready").status, 200);
  clock.now += milliseconds(900);
  EXPECT_EQ(call(server, "GET", "/ready").status, 200);  // 900 ms: inside the window
  clock.now += milliseconds(200);
  HttpResponse r = call(server, "GET", "/ready");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(json::parse(r.body)["status"], "stalled");
  EXPECT_NEAR(json::parse(r.body)["seconds_since_progress"].get<double>(), 1.1, 1e-6);
  EXPECT_NE(call(server, "GET", "/metrics").body.find("loom_engine_stalled 1\n"),
            std::string::npos);
  EXPECT_EQ(call(server, "GET", "/health").status, 200);  // liveness is not readiness

  service.set_stats(11, 3, 5);  // one step later
  EXPECT_EQ(call(server, "GET", "/ready").status, 200);
  EXPECT_NE(call(server, "GET", "/metrics").body.find("loom_engine_stalled 0\n"),
            std::string::npos);
  clock.now += milliseconds(5000);
  EXPECT_EQ(call(server, "GET", "/ready").status, 503);
  service.set_stats(11, 0, 0);  // the work went away: not stuck
  EXPECT_EQ(call(server, "GET", "/ready").status, 200);
}

// The engine publishes nothing while its first step after idle runs: the
// requests the server submitted are the work the watchdog waits on.
TEST(OpenAiServer, ReadyFailsWhenTheFirstStepAfterIdleHangs) {
  HoldingService service;
  ManualClock clock;
  OpenAiServerConfig config;
  config.watchdog = milliseconds(1000);
  config.stats_interval = milliseconds(3600 * 1000);
  config.watchdog_clock = clock.fn();
  OpenAiServer server(config, service, model_ctx());
  EXPECT_EQ(call(server, "GET", "/ready").status, 200);
  clock.now += milliseconds(5000);  // idle for long
  call(server, "POST", "/v1/completions", R"({"prompt": "hi", "max_tokens": 4, "stream": true})");
  EXPECT_EQ(server.in_flight(), 1u);
  EXPECT_EQ(call(server, "GET", "/ready").status, 200);
  clock.now += milliseconds(900);
  EXPECT_EQ(call(server, "GET", "/ready").status, 200);
  clock.now += milliseconds(200);
  HttpResponse r = call(server, "GET", "/ready");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(json::parse(r.body)["status"], "stalled");
  service.finish_all();
  EXPECT_EQ(server.in_flight(), 0u);
  EXPECT_EQ(call(server, "GET", "/ready").status, 200);
}

// A failed step (an internal engine error) makes /ready fail until a step
// works again or a watchdog window passes without another failure.
TEST(OpenAiServer, ReadyReflectsEngineFailures) {
  class FailingService : public FakeService {
   public:
    RequestId submit(Request request, StreamCallback callback) override {
      if (!fail) return FakeService::submit(std::move(request), std::move(callback));
      StreamEvent e;
      e.request_id = 99;
      e.error = EngineErrorKind::Internal;
      e.error_message = "step failed: injected";
      e.finish = FinishReason::Error;
      e.request_done = true;
      callback(e);
      return 99;
    }
    bool fail = true;
  };
  FailingService service;
  ManualClock clock;
  OpenAiServerConfig config;
  config.watchdog = milliseconds(1000);
  config.stats_interval = milliseconds(3600 * 1000);
  config.watchdog_clock = clock.fn();
  OpenAiServer server(config, service, model_ctx());
  const std::string body = R"({"prompt": "hi", "max_tokens": 1})";
  EXPECT_EQ(call(server, "POST", "/v1/completions", body).status, 500);
  HttpResponse r = call(server, "GET", "/ready");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(json::parse(r.body)["status"], "engine failing");
  EXPECT_EQ(server.metrics().value("loom_engine_errors_total"), 1);
  clock.now += milliseconds(1500);  // a window without another failure
  EXPECT_EQ(call(server, "GET", "/ready").status, 200);
  EXPECT_EQ(call(server, "POST", "/v1/completions", body).status, 500);
  EXPECT_EQ(call(server, "GET", "/ready").status, 503);
  service.fail = false;
  EXPECT_EQ(call(server, "POST", "/v1/completions", body).status, 200);  // a step worked
  EXPECT_EQ(call(server, "GET", "/ready").status, 200);
}

TEST(OpenAiServer, QueueTimeAndTenantsReachMetricsAndEngine) {
  FakeService service;
  TenantRegistry tenants;
  tenants.add_tenant(Tenant{"alice", {}, 3.0f}, {"sk-a"});
  tenants.add_tenant(Tenant{"bob", {}}, {"sk-b"});
  OpenAiServer server(OpenAiServerConfig{}, service, model_ctx(), std::move(tenants));
  const std::string body = R"({"prompt": "hello", "max_tokens": 1})";
  EXPECT_EQ(call(server, "POST", "/v1/completions", body, "sk-a").status, 200);
  EXPECT_EQ(call(server, "POST", "/v1/completions", body, "sk-b").status, 200);
  EXPECT_EQ(call(server, "POST", "/v1/completions", body, "sk-b").status, 200);
  const auto reqs = service.submitted();
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[0].tenant, "alice");
  EXPECT_EQ(reqs[0].tenant_weight, 3.0f);
  EXPECT_EQ(reqs[1].tenant, "bob");
  EXPECT_EQ(reqs[1].tenant_weight, 1.0f);

  Metrics& m = server.metrics();
  EXPECT_EQ(m.value("loom_tenant_requests_total", {{"tenant", "bob"}, {"status", "200"}}), 2);
  EXPECT_EQ(m.value("loom_tenant_requests_total", {{"tenant", "alice"}, {"status", "200"}}), 1);
  EXPECT_EQ(m.value("loom_tenant_tokens_total", {{"tenant", "bob"}, {"kind", "generation"}}), 2);
  const std::string text = m.render();
  // Three requests, each scheduled ~300 ms after it arrived: all in the
  // (0.25, 0.5] bucket.
  EXPECT_NE(text.find("loom_request_queue_time_seconds_count 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("loom_request_queue_time_seconds_bucket{le=\"0.25\"} 0\n"),
            std::string::npos);
  EXPECT_NE(text.find("loom_request_queue_time_seconds_bucket{le=\"0.5\"} 3\n"), std::string::npos);
  // The issue's monitoring list, by name.
  for (const char* name :
       {"loom_requests_total", "loom_time_to_first_token_seconds",
        "loom_time_per_output_token_seconds", "loom_inter_token_latency_seconds",
        "loom_e2e_request_latency_seconds", "loom_request_queue_time_seconds",
        "loom_num_requests_running", "loom_num_requests_waiting", "loom_kv_cache_usage_ratio",
        "loom_prefix_cache_hit_rate", "loom_preemptions_total", "loom_prompt_tokens_total",
        "loom_generation_tokens_total", "loom_tenant_requests_total", "loom_tenant_tokens_total"})
    EXPECT_NE(text.find(std::string("# TYPE ") + name + " "), std::string::npos) << name;
  EXPECT_EQ(text.find("loom_gpu_"), std::string::npos);  // no GPU source: no GPU series
}

namespace {
// A histogram series' _sum or _count (no labels) from the rendered text; -1 when absent.
double series(const std::string& text, const std::string& name) {
  const std::string key = "\n" + name + " ";
  const size_t at = text.find(key);
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + key.size()));
}
}  // namespace

// A request's stages reach their histograms: prepare (arrival to
// submission), prefill (first scheduled to first token), decode (first to
// last token), the engine's detokenisation time (from the last event) and
// the server's delivery time.
TEST(OpenAiServer, RequestStagesReachMetrics) {
  HoldingService service;
  OpenAiServer server(OpenAiServerConfig{}, service, model_ctx());
  auto sink = std::make_shared<CaptureSink>();
  HttpRequest req;
  req.method = "POST";
  req.target = "/v1/completions";
  req.body = R"({"prompt": "hello", "max_tokens": 3, "stream": true})";
  server.handle(std::move(req), sink);
  std::vector<StreamCallback> cbs = service.take_callbacks();
  ASSERT_EQ(cbs.size(), 1u);
  const auto scheduled = SteadyClock::now() - milliseconds(200);
  for (int i = 0; i < 3; ++i) {
    if (i > 0) std::this_thread::sleep_for(milliseconds(30));
    StreamEvent e;
    e.request_id = 1;
    e.token_ids = {100 + i};
    e.text = "ab";
    e.first_scheduled = scheduled;
    if (i == 2) {
      e.finish = FinishReason::Length;
      e.request_done = true;
      e.detokenize_seconds = 0.0125;
    }
    cbs[0](e);
  }
  EXPECT_EQ(sink->response().status, 200);
  const std::string text = server.metrics().render();
  EXPECT_EQ(series(text, "loom_request_prepare_seconds_count"), 1) << text;
  EXPECT_GE(series(text, "loom_request_prepare_seconds_sum"), 0);
  EXPECT_EQ(series(text, "loom_request_prefill_seconds_count"), 1);
  EXPECT_GE(series(text, "loom_request_prefill_seconds_sum"),
            0.2);  // scheduled 200 ms before its first token
  EXPECT_LT(series(text, "loom_request_prefill_seconds_sum"), 0.2 + 5);
  EXPECT_EQ(series(text, "loom_request_decode_seconds_count"), 1);
  EXPECT_GE(series(text, "loom_request_decode_seconds_sum"), 0.06);  // two 30 ms gaps
  EXPECT_EQ(series(text, "loom_request_detokenize_seconds_count"), 1);
  EXPECT_DOUBLE_EQ(series(text, "loom_request_detokenize_seconds_sum"), 0.0125);
  EXPECT_EQ(series(text, "loom_request_deliver_seconds_count"), 1);
  EXPECT_GT(series(text, "loom_request_deliver_seconds_sum"), 0);
  EXPECT_EQ(series(text, "loom_e2e_request_latency_seconds_count"), 1);
}

namespace {
// Freed heap memory is given back to the kernel after requests finished (the
// RSS of a server with many mid-stream disconnects crept up otherwise), and
// not again while no request finishes.
TEST(OpenAiServer, HeapTrimmedAfterRequestsFinish) {
  FakeService service;
  service.queue = milliseconds(0);
  OpenAiServerConfig config;
  config.stats_interval = milliseconds(5);
  config.heap_trim_interval = milliseconds(20);
  OpenAiServer server(config, service, model_ctx());
  Metrics& m = server.metrics();
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(m.value("loom_heap_trims_total"), 0);  // nothing finished yet
  EXPECT_EQ(
      call(server, "POST", "/v1/completions", R"({"prompt": "hello", "max_tokens": 1})").status,
      200);
  const auto deadline = SteadyClock::now() + std::chrono::seconds(10);
  while (m.value("loom_heap_trims_total") == 0 && SteadyClock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(5));
  EXPECT_EQ(m.value("loom_heap_trims_total"), 1);
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(m.value("loom_heap_trims_total"), 1);
}

class FakeGpus : public GpuMetricsSource {
 public:
  std::vector<GpuSample> sample() override {
    ++calls;
    return {{0, 0.25, 1024, 80ull << 30}, {3, 1.0, 150000000000ull, 150754820096ull}};
  }
  int calls = 0;
};
}  // namespace

TEST(GpuMetrics, FakeSourceFormatsPerGpuSeries) {
  FakeService service;
  auto gpus = std::make_shared<FakeGpus>();
  OpenAiServerConfig config;
  config.gpu_metrics = gpus;
  OpenAiServer server(config, service, model_ctx());
  const std::string text = call(server, "GET", "/metrics").body;
  EXPECT_GE(gpus->calls, 1);
  for (const char* line : {
           "# TYPE loom_gpu_utilization_ratio gauge\n",
           "loom_gpu_utilization_ratio{gpu=\"0\"} 0.25\n",
           "loom_gpu_utilization_ratio{gpu=\"3\"} 1\n",
           "loom_gpu_memory_used_bytes{gpu=\"0\"} 1024\n",
           "loom_gpu_memory_total_bytes{gpu=\"0\"} 85899345920\n",
           "loom_gpu_memory_used_bytes{gpu=\"3\"} 150000000000\n",
           "loom_gpu_memory_total_bytes{gpu=\"3\"} 150754820096\n",
       })
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
}

TEST(GpuMetrics, NvmlAbsentOrIncompleteGivesNoSource) {
  EXPECT_EQ(open_nvml("libloom-no-such-library.so.1"), nullptr);
  EXPECT_EQ(open_nvml("libm.so.6"), nullptr);  // loads, but has no NVML symbols
}
