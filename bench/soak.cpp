#include "soak.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "net/http_client.h"
#include "net/prometheus_text.h"
#include "net/url.h"
#include "serve_stats.h"
#include "serve_workload.h"
#include "soak_stats.h"
#include "sse.h"

namespace loom::bench {

namespace {

using Clock = std::chrono::steady_clock;
using net::StreamingHttpClient;
using Headers = StreamingHttpClient::Headers;

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// VmRSS, RssAnon, RssFile (bytes) and open fds of a local process.
void read_proc(int64_t pid, SoakServerSample& s) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  auto field = [&](const char* name, int64_t& out) {
    if (line.rfind(name, 0) != 0) return;
    std::istringstream ss(line.substr(std::string(name).size()));
    int64_t kb = 0;
    ss >> kb;
    out = kb * 1024;
  };
  while (std::getline(in, line)) {
    field("VmRSS:", s.rss_bytes);
    field("RssAnon:", s.rss_anon_bytes);
    field("RssFile:", s.rss_file_bytes);
  }
  std::error_code ec;
  s.fds = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++s.fds;
}

// Samples the server on its own thread (blocking requests) until stopped.
class ServerSampler {
 public:
  ServerSampler(const SoakOptions& opt, Clock::time_point t0)
      : opt_(opt), url_(net::parse_url(opt.base_url)), t0_(t0) {
    if (!opt.api_key.empty()) headers_.push_back({"Authorization", "Bearer " + opt.api_key});
  }

  SoakServerSample sample() const {
    SoakServerSample s;
    s.t_s = std::chrono::duration<double>(Clock::now() - t0_).count();
    if (opt_.server_pid > 0) read_proc(opt_.server_pid, s);
    auto r = net::http_request(url_, "GET", "/metrics", "", 10, headers_);
    if (r.status == 200) {
      for (const auto& p : net::parse_prometheus(r.body)) {
        if (!p.labels.empty()) continue;
        if (p.name == "loom_kv_cache_used_blocks") s.kv_used_blocks = p.value;
        if (p.name == "loom_kv_cache_total_blocks") s.kv_total_blocks = p.value;
        if (p.name == "loom_num_requests_running") s.running = p.value;
        if (p.name == "loom_num_requests_waiting") s.waiting = p.value;
        if (p.name == "loom_http_requests_in_flight") s.http_in_flight = p.value;
      }
    }
    return s;
  }

  void start() {
    push(sample());
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> lk(mu_);
      while (!stop_) {
        cv_.wait_for(lk, std::chrono::duration<double>(opt_.sample_interval_s));
        if (stop_) break;
        lk.unlock();
        push(sample());
        lk.lock();
      }
    });
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void push(SoakServerSample s) {
    std::lock_guard<std::mutex> lk(samples_mu_);
    samples_.push_back(std::move(s));
  }
  std::vector<SoakServerSample> samples() const {
    std::lock_guard<std::mutex> lk(samples_mu_);
    return samples_;
  }

 private:
  const SoakOptions& opt_;
  net::Url url_;
  Clock::time_point t0_;
  Headers headers_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  mutable std::mutex samples_mu_;
  std::vector<SoakServerSample> samples_;
};

// What a streamed answer held.
struct StreamCheck {
  bool done = false;  // [DONE]
  bool usage = false;
  std::string error;  // an error event
  std::map<int64_t, bool> finished;  // choice index -> a finish_reason arrived
  int64_t events = 0;

  void on_event(std::string_view data) {
    ++events;
    if (data == "[DONE]") {
      done = true;
      return;
    }
    auto j = nlohmann::json::parse(data, nullptr, false);
    if (!j.is_object()) {
      if (error.empty()) error = "unparsable event";
      return;
    }
    if (j.contains("error") && error.empty()) error = "error event: " + j["error"].dump();
    if (j.contains("usage") && j["usage"].is_object()) usage = true;
    if (j.contains("choices") && j["choices"].is_array())
      for (const auto& c : j["choices"]) {
        const int64_t index = c.value("index", int64_t(-1));
        const bool fin = c.contains("finish_reason") && c["finish_reason"].is_string();
        finished[index] = finished[index] || fin;
      }
  }
  std::string problem() const {
    if (!error.empty()) return error;
    if (!done) return "no [DONE]";
    for (const auto& [index, fin] : finished)
      if (!fin) return "choice " + std::to_string(index) + " without a finish_reason";
    if (finished.empty()) return "no choices";
    return "";
  }
};

class SoakDriver {
 public:
  SoakDriver(const SoakOptions& opt, Clock::time_point t0)
      : opt_(opt),
        client_(io_, net::parse_url(opt.base_url), opt.timeout_s),
        tick_(io_),
        rng_(opt.seed),
        t0_(t0) {
    if (!opt.api_key.empty()) auth_.push_back({"Authorization", "Bearer " + opt.api_key});
    if (!opt.limited_api_key.empty())
      limited_auth_.push_back({"Authorization", "Bearer " + opt.limited_api_key});
    for (SoakKind k : soak_kinds())
      if (k != SoakKind::TenantAtLimit || !opt.limited_api_key.empty()) {
        kinds_.push_back(k);
        weights_.push_back(soak_kind_weight(k));
      }
  }

  // Runs to the end of the duration; `report` is called on the io thread at
  // each interval with the records of that interval.
  std::vector<SoakRecord> run(const std::function<void(std::vector<SoakRecord>)>& report) {
    report_ = report;
    warmup_burst();
    arm_tick();
    io_.run();
    if (!window_.empty()) report_(std::move(window_));
    return std::move(all_);
  }

 private:
  double now() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }

  void arm_tick() {
    next_tick_ += opt_.report_interval_s;
    tick_.expires_at(t0_ + seconds(next_tick_));
    tick_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      report_(std::move(window_));
      window_.clear();
      if (now() < opt_.duration_s) arm_tick();
    });
  }

  void record(SoakRecord r) {
    window_.push_back(r);
    all_.push_back(std::move(r));
  }

  int32_t uniform(int32_t lo, int32_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<int32_t>(lo, hi)(rng_);
  }

  nlohmann::json id_prompt(int32_t len) {
    nlohmann::json ids = nlohmann::json::array();
    for (int32_t i = 0; i < len; ++i)
      ids.push_back(opt_.token_ids[size_t(uniform(0, int32_t(opt_.token_ids.size()) - 1))]);
    return ids;
  }
  std::string text_prompt(int32_t words) {
    std::vector<int32_t> w;
    for (int32_t i = 0; i < words; ++i) w.push_back(uniform(0, int32_t(prompt_words().size()) - 1));
    return render_words(w);
  }

  // First, kBurst requests of the longest prompt at once: more prompt tokens
  // than a step takes, so the engine runs the largest step it can and its
  // buffers reach their high-water mark during warm-up, not in the middle of
  // the slope. Then the slots start.
  static constexpr int kBurst = 24;
  void warmup_burst() {
    auto left = std::make_shared<int>(kBurst);
    for (int i = 0; i < kBurst; ++i) {
      nlohmann::json body = {{"model", opt_.model},
                             {"prompt", id_prompt(kMaxPrompt)},
                             {"ignore_eos", true},
                             {"max_tokens", 4},
                             {"n", 2}};
      send_plain(SoakKind::Plain, "/v1/completions", body.dump(), auth_, 0, [this, left] {
        if (--*left > 0) return;
        for (int64_t k = 0; k < std::max<int64_t>(1, opt_.concurrency); ++k) launch();
      });
    }
  }

  // Starts the next request of one slot (nothing once the duration is over).
  void launch() {
    if (now() >= opt_.duration_s) return;  // the slot ends; run() reports what is left
    std::discrete_distribution<size_t> pick(weights_.begin(), weights_.end());
    const SoakKind kind = kinds_[pick(rng_)];
    switch (kind) {
      case SoakKind::Stream:
      case SoakKind::ChatStream:
      case SoakKind::StreamDisconnect: return stream(kind);
      case SoakKind::Plain:
      case SoakKind::PlainDisconnect: return plain(kind);
      case SoakKind::BadRequest: return bad_request();
      case SoakKind::Tokenize: return tokenize();
      case SoakKind::TenantAtLimit: return tenant_pair();
    }
  }

  void stream(SoakKind kind) {
    const bool chat = kind == SoakKind::ChatStream;
    const bool disconnect = kind == SoakKind::StreamDisconnect;
    nlohmann::json body = {{"model", opt_.model},
                           {"stream", true},
                           {"stream_options", {{"include_usage", true}}},
                           {"ignore_eos", true},
                           {"max_tokens", disconnect ? 64 : uniform(4, opt_.max_output_tokens)},
                           {"temperature", uniform(0, 1) ? 0.8 : 0.0}};
    if (chat) body["messages"] = {{{"role", "user"}, {"content", text_prompt(uniform(4, 40))}}};
    else body["prompt"] = id_prompt(uniform(8, kMaxPrompt));
    if (!chat && uniform(0, 3) == 0) body["n"] = 2;
    struct State {
      SoakRecord rec;
      StreamCheck check;
      std::unique_ptr<SseParser> sse;
      int64_t cancel_after = 0;
      std::function<void()> cancel;
    };
    auto st = std::make_shared<State>();
    st->rec.kind = kind;
    st->rec.send_s = now();
    st->cancel_after = disconnect ? uniform(1, 6) : 0;
    st->sse = std::make_unique<SseParser>([this, st](std::string_view data) {
      st->check.on_event(data);
      if (st->rec.first_token_s < 0 && data.find("\"text\":\"") != std::string_view::npos)
        st->rec.first_token_s = now();
      if (st->rec.first_token_s < 0 && data.find("\"content\":\"") != std::string_view::npos &&
          data.find("\"content\":\"\"") == std::string_view::npos)
        st->rec.first_token_s = now();
      if (st->cancel_after > 0 && st->check.events >= st->cancel_after && st->cancel) {
        auto cancel = std::move(st->cancel);
        st->cancel = nullptr;
        boost::asio::post(io_, cancel);  // not from inside the read handler
      }
    });
    StreamingHttpClient::Handlers h;
    h.on_status = [st](int status) { st->rec.status = status; };
    h.on_body = [st](std::string_view bytes) {
      if (st->rec.status == 200) st->sse->feed(bytes);
    };
    h.on_done = [this, st, disconnect](const std::string& error) {
      auto& r = st->rec;
      r.done_s = now();
      st->cancel = nullptr;
      if (disconnect) {
        r.expected = error == "cancelled" || (error.empty() && r.status == 200);
        if (!r.expected) r.problem = error.empty() ? "HTTP " + std::to_string(r.status) : error;
      } else if (!error.empty()) {
        r.problem = error;
      } else if (r.status != 200) {
        r.problem = "HTTP " + std::to_string(r.status);
      } else {
        st->sse->finish();
        r.problem = st->check.problem();
        if (r.problem.empty() && !st->check.usage) r.problem = "no usage chunk";
        r.expected = r.problem.empty();
      }
      record(std::move(r));
      launch();
    };
    st->cancel = client_.send("POST", chat ? "/v1/chat/completions" : "/v1/completions",
                              body.dump(), auth_, std::move(h));
  }

  void plain(SoakKind kind) {
    const bool disconnect = kind == SoakKind::PlainDisconnect;
    nlohmann::json body = {{"model", opt_.model},
                           {"prompt", id_prompt(uniform(8, kMaxPrompt))},
                           {"ignore_eos", true},
                           {"max_tokens", disconnect ? 64 : uniform(4, opt_.max_output_tokens)}};
    if (uniform(0, 3) == 0) body["n"] = 2;
    send_plain(kind, "/v1/completions", body.dump(), auth_, disconnect ? uniform(50, 500) : 0,
               [this] { launch(); });
  }

  // A request whose whole answer is checked at the end; cancel_ms > 0: the
  // client goes away after that long.
  void send_plain(SoakKind kind, const std::string& path, std::string body, const Headers& headers,
                  int32_t cancel_ms, std::function<void()> then, const std::string& method = "POST") {
    struct State {
      SoakRecord rec;
      std::string body;
      std::unique_ptr<boost::asio::steady_timer> timer;
    };
    auto st = std::make_shared<State>();
    st->rec.kind = kind;
    st->rec.send_s = now();
    StreamingHttpClient::Handlers h;
    h.on_status = [st](int status) { st->rec.status = status; };
    h.on_body = [st](std::string_view bytes) {
      if (st->body.size() < (size_t(16) << 20)) st->body.append(bytes);
    };
    h.on_done = [this, st, kind, cancel_ms, then](const std::string& error) {
      auto& r = st->rec;
      r.done_s = now();
      if (st->timer) st->timer->cancel();
      check_plain(r, kind, error, st->body, cancel_ms > 0);
      record(std::move(r));
      then();
    };
    auto cancel = client_.send(method, path, std::move(body), headers, std::move(h));
    if (cancel_ms > 0) {
      st->timer = std::make_unique<boost::asio::steady_timer>(io_, seconds(cancel_ms / 1e3));
      st->timer->async_wait([cancel](const boost::system::error_code& ec) {
        if (!ec) cancel();
      });
    }
  }

  static void check_plain(SoakRecord& r, SoakKind kind, const std::string& error,
                          const std::string& body, bool may_cancel) {
    auto fail = [&](std::string why) {
      r.expected = false;
      r.problem = std::move(why);
    };
    r.expected = true;
    if (may_cancel && error == "cancelled") return;
    if (!error.empty()) return fail(error);
    const auto j = nlohmann::json::parse(body, nullptr, false);
    if (kind == SoakKind::BadRequest) {
      if (r.status < 400 || r.status >= 500) return fail("HTTP " + std::to_string(r.status));
      if (!j.is_object() || !j.contains("error")) return fail("no error body");
      return;
    }
    if (kind == SoakKind::TenantAtLimit && r.status == 429) return;
    if (r.status != 200) return fail("HTTP " + std::to_string(r.status) + ": " + body.substr(0, 200));
    if (!j.is_object()) return fail("unparsable body");
    if (kind == SoakKind::Tokenize) {
      if (!j.contains("count")) fail("no count");
      return;
    }
    if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty())
      return fail("no choices");
    for (const auto& c : j["choices"])
      if (!c.contains("finish_reason") || !c["finish_reason"].is_string())
        return fail("a choice without finish_reason");
  }

  void bad_request() {
    const std::string model = nlohmann::json(opt_.model).dump();
    struct Bad {
      const char* method;
      const char* path;
      std::string body;
    };
    std::string deep(200, '[');
    deep += std::string(200, ']');
    const std::vector<Bad> bad = {
        {"POST", "/v1/completions", "{\"prompt\": "},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"max_tokens\": \"ten\"}"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"n\": 100000}"},
        {"POST", "/v1/completions", "{\"prompt\": [999999999]}"},
        {"POST", "/v1/completions", "{\"model\": \"no-such-model\", \"prompt\": \"x\"}"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"x\": " + deep + "}"},
        {"POST", "/v1/completions", "{\"prompt\": \"x\", \"temperature\": -3}"},
        {"POST", "/v1/chat/completions", "{\"model\": " + model + ", \"messages\": \"hi\"}"},
        {"POST", "/v1/completions", "\xff\xfe not utf-8"},
        {"GET", "/v1/completions", ""},
        {"POST", "/v1/no-such-route", "{}"},
    };
    const Bad& b = bad[size_t(uniform(0, int32_t(bad.size()) - 1))];
    Headers headers = auth_;
    if (!opt_.api_key.empty() && uniform(0, 9) == 0)
      headers = {{"Authorization", "Bearer not-a-key"}};  // 401
    send_plain(SoakKind::BadRequest, b.path, b.body, headers, 0, [this] { launch(); }, b.method);
  }

  void tokenize() {
    nlohmann::json body = {{"model", opt_.model}, {"prompt", text_prompt(uniform(1, 200))}};
    send_plain(SoakKind::Tokenize, "/tokenize", body.dump(), auth_, 0, [this] { launch(); });
  }

  // Two requests at once on a tenant limited to one: 200 or 429 each.
  void tenant_pair() {
    auto left = std::make_shared<int>(2);
    for (int i = 0; i < 2; ++i) {
      nlohmann::json body = {{"model", opt_.model},
                             {"prompt", id_prompt(uniform(8, 32))},
                             {"ignore_eos", true},
                             {"max_tokens", uniform(4, 16)}};
      send_plain(SoakKind::TenantAtLimit, "/v1/completions", body.dump(), limited_auth_, 0,
                 [this, left] {
                   if (--*left == 0) launch();
                 });
    }
  }

  static constexpr int32_t kMaxPrompt = 96;  // tokens of the longest id prompt

  const SoakOptions& opt_;
  boost::asio::io_context io_;
  StreamingHttpClient client_;
  boost::asio::steady_timer tick_;
  std::mt19937_64 rng_;
  Clock::time_point t0_;
  double next_tick_ = 0;
  Headers auth_, limited_auth_;
  std::vector<SoakKind> kinds_;
  std::vector<double> weights_;
  std::function<void(std::vector<SoakRecord>)> report_;
  std::vector<SoakRecord> window_, all_;
};

}  // namespace

nlohmann::json run_soak(const SoakOptions& opt, std::FILE* lines) {
  if (opt.token_ids.empty()) LOOM_THROW("the soak needs token ids to draw prompts from");
  const auto t0 = Clock::now();
  ServerSampler sampler(opt, t0);
  const SoakServerSample first = sampler.sample();
  if (first.kv_total_blocks <= 0 && opt.server_pid <= 0)
    LOOM_THROW("cannot read {}/metrics (and no --server-pid): nothing to watch", opt.base_url);
  sampler.start();
  int64_t minute = 0;
  SoakDriver driver(opt, t0);
  auto all = driver.run([&](std::vector<SoakRecord> window) {
    nlohmann::json line = soak_window_summary(window);
    line["soak_interval"] = ++minute;
    line["elapsed_s"] = std::chrono::duration<double>(Clock::now() - t0).count();
    line["server"] = to_json(sampler.sample());
    std::fprintf(lines, "%s\n", line.dump().c_str());
    std::fflush(lines);
  });
  sampler.stop();
  // Drained: nothing in flight, every KV block back.
  SoakServerSample drained = sampler.sample();
  const auto drain_deadline = Clock::now() + seconds(opt.timeout_s);
  while ((drained.http_in_flight > 0 || drained.kv_used_blocks > 0 || drained.running > 0 ||
          drained.waiting > 0) &&
         Clock::now() < drain_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    drained = sampler.sample();
  }
  const double warmup = opt.warmup_s >= 0 ? opt.warmup_s : std::min(600.0, opt.duration_s / 6);
  nlohmann::json report;
  report["benchmark"] = "serve-soak";
  report["duration_s"] = opt.duration_s;
  report["concurrency"] = opt.concurrency;
  report["seed"] = opt.seed;
  std::vector<nlohmann::json> mix;
  for (SoakKind k : soak_kinds()) mix.push_back({{soak_kind_name(k), soak_kind_weight(k)}});
  report["mix"] = mix;
  report["tenant_at_limit"] = !opt.limited_api_key.empty();
  report["totals"] = soak_window_summary(all, 10);
  report["server_start"] = to_json(first);
  report["server_drained"] = to_json(drained);
  report["memory"] = soak_memory_summary(sampler.samples(), warmup);
  return report;
}

}  // namespace loom::bench
