#include "serve_client.h"

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "net/http_client.h"
#include "net/prometheus_text.h"
#include "net/url.h"
#include "sse.h"

namespace loom::bench {

namespace {

using Clock = std::chrono::steady_clock;

std::string clip(std::string_view s, size_t n = 300) {
  std::string out(s.substr(0, n));
  for (char& c : out)
    if (c == '\n' || c == '\r') c = ' ';
  return out;
}

// VmRSS and VmHWM of a local process, in bytes; zeros if unreadable.
std::pair<int64_t, int64_t> proc_memory(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  int64_t rss = 0, hwm = 0;
  while (std::getline(in, line)) {
    auto field = [&](const char* name, int64_t& out) {
      if (line.rfind(name, 0) != 0) return;
      std::istringstream ss(line.substr(std::string(name).size()));
      int64_t kb = 0;
      ss >> kb;
      out = kb * 1024;
    };
    field("VmRSS:", rss);
    field("VmHWM:", hwm);
  }
  return {rss, hwm};
}

// Scrapes /metrics on its own thread (blocking requests) until stopped.
class Scraper {
 public:
  Scraper(const ServeRunOptions& opt) : opt_(opt), url_(net::parse_url(opt.base_url)) {}

  void scrape(bool first) {
    if (opt_.server_pid > 0) {
      auto [rss, hwm] = proc_memory(opt_.server_pid);
      std::lock_guard<std::mutex> lk(mu_);
      tracker_.observe_rss(rss, hwm);
    }
    if (!metrics_ok_) return;
    auto r = net::http_request(url_, "GET", "/metrics", "", 5);
    if (r.status != 200) {
      if (first) metrics_ok_ = false;  // a server without /metrics
      return;
    }
    auto samples = net::parse_prometheus(r.body);
    std::lock_guard<std::mutex> lk(mu_);
    tracker_.observe(samples, first);
  }

  void start() {
    scrape(true);
    if (opt_.scrape_interval_s <= 0) return;
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> lk(stop_mu_);
      while (!stop_) {
        stop_cv_.wait_for(lk, std::chrono::duration<double>(opt_.scrape_interval_s));
        if (stop_) break;
        lk.unlock();
        scrape(false);
        lk.lock();
      }
    });
  }

  nlohmann::json finish() {
    {
      std::lock_guard<std::mutex> lk(stop_mu_);
      stop_ = true;
    }
    stop_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    scrape(false);
    std::lock_guard<std::mutex> lk(mu_);
    nlohmann::json j = tracker_.to_json();
    j["metrics_endpoint"] = metrics_ok_.load();
    return j;
  }

 private:
  const ServeRunOptions& opt_;
  net::Url url_;
  std::atomic<bool> metrics_ok_{true};
  std::mutex mu_;
  ServerMetricsTracker tracker_;
  std::thread thread_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
};

// Drives one run on the calling thread's io_context.
class Driver {
 public:
  Driver(const std::vector<ServeConversation>& convs, const ServeRunOptions& opt)
      : convs_(convs),
        opt_(opt),
        client_(io_, net::parse_url(opt.base_url), opt.timeout_s),
        timer_(io_),
        answers_(convs.size()) {
    for (const auto& c : convs) total_ += c.turns.size();
    arrivals_ = poisson_arrivals(convs.size(), opt.request_rate, opt.seed);
  }

  ServeRun run() {
    t0_ = Clock::now();
    next_arrival();
    io_.run();
    ServeRun out;
    out.records = std::move(records_);
    double first = 1e300, last = 0;
    for (const auto& r : out.records) {
      first = std::min(first, r.send_s);
      last = std::max(last, r.done_s);
    }
    out.duration_s = out.records.empty() ? 0 : last - first;
    return out;
  }

 private:
  double now() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }

  void next_arrival() {
    while (arrived_ < convs_.size() && arrivals_[arrived_] <= now())
      ready_.push_back({arrived_++, 0});
    pump();
    if (arrived_ >= convs_.size()) return;
    timer_.expires_at(t0_ + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(arrivals_[arrived_])));
    timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) next_arrival();
    });
  }

  void pump() {
    while (!ready_.empty() && (opt_.max_concurrency <= 0 || in_flight_ < opt_.max_concurrency)) {
      auto [conv, turn] = ready_.front();
      ready_.pop_front();
      send(conv, turn);
    }
  }

  void send(size_t conv, size_t turn) {
    struct State {
      RequestRecord rec;
      std::string answer;
      int status = 0;
      std::string error_body;
      bool done_marker = false;
      std::unique_ptr<SseParser> sse;
    };
    auto st = std::make_shared<State>();
    int64_t prompt_len = 0;
    nlohmann::json body = request_body(convs_[conv], turn, answers_[conv], opt_.body, &prompt_len);
    if (opt_.customize) opt_.customize(conv, body);
    st->rec.prompt_tokens = prompt_len;
    const ServeEndpoint ep = opt_.body.endpoint;
    st->sse = std::make_unique<SseParser>([this, st, ep](std::string_view data) {
      if (apply_sse_event(data, now(), ep, st->rec, &st->answer)) st->done_marker = true;
    });
    ++in_flight_;
    st->rec.send_s = now();
    net::StreamingHttpClient::Handlers h;
    h.on_status = [st](int status) { st->status = status; };
    h.on_body = [st](std::string_view bytes) {
      if (st->status == 200)
        st->sse->feed(bytes);
      else if (st->error_body.size() < 2000)
        st->error_body.append(bytes);
    };
    h.on_done = [this, st, conv, turn](const std::string& error) {
      auto& rec = st->rec;
      rec.done_s = now();
      if (st->status == 200) st->sse->finish();
      if (!error.empty() && rec.error.empty()) rec.error = error;
      if (st->status != 200 && rec.error.empty())
        rec.error = "HTTP " + std::to_string(st->status) + ": " + clip(st->error_body);
      if (rec.error.empty() && rec.chunk_s.empty()) rec.error = "no generated text in the stream";
      rec.ok = rec.error.empty();
      if (rec.ok && !rec.usage_reported)
        rec.output_tokens = static_cast<int64_t>(rec.chunk_s.size());
      if (answers_[conv].size() <= turn) answers_[conv].resize(turn + 1);
      answers_[conv][turn] = std::move(st->answer);
      records_.push_back(std::move(rec));
      if (opt_.on_progress) opt_.on_progress(records_.size(), total_);
      --in_flight_;
      if (turn + 1 < convs_[conv].turns.size()) ready_.push_front({conv, turn + 1});
      pump();
      if (records_.size() == total_) timer_.cancel();
    };
    const std::string path = ep == ServeEndpoint::Chat ? "/v1/chat/completions" : "/v1/completions";
    client_.post(path, body.dump(), std::move(h));
  }

  const std::vector<ServeConversation>& convs_;
  const ServeRunOptions& opt_;
  boost::asio::io_context io_;
  net::StreamingHttpClient client_;
  boost::asio::steady_timer timer_;
  Clock::time_point t0_;
  std::vector<double> arrivals_;
  size_t arrived_ = 0, total_ = 0;
  int64_t in_flight_ = 0;
  std::deque<std::pair<size_t, size_t>> ready_;  // (conversation, turn)
  std::vector<std::vector<std::string>> answers_;
  std::vector<RequestRecord> records_;
};

}  // namespace

bool apply_sse_event(std::string_view data, double now_s, ServeEndpoint endpoint,
                     RequestRecord& rec, std::string* answer) {
  if (data == "[DONE]") return true;
  auto j = nlohmann::json::parse(data, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    if (rec.error.empty()) rec.error = "unparsable stream event: " + clip(data);
    return false;
  }
  if (j.contains("error")) {
    if (rec.error.empty()) {
      const auto& e = j["error"];
      rec.error =
          "stream error: " + clip(e.is_object() && e.contains("message") && e["message"].is_string()
                                      ? e["message"].get<std::string>()
                                      : e.dump());
    }
    return false;
  }
  if (auto c = j.find("choices"); c != j.end() && c->is_array() && !c->empty()) {
    const auto& choice = (*c)[0];
    const nlohmann::json* text = nullptr;
    if (endpoint == ServeEndpoint::Chat) {
      if (auto d = choice.find("delta"); d != choice.end() && d->is_object()) {
        if (auto t = d->find("content"); t != d->end()) text = &*t;
        if ((!text || !text->is_string() || text->get_ref<const std::string&>().empty()))
          if (auto t = d->find("reasoning_content"); t != d->end()) text = &*t;
      }
    } else if (auto t = choice.find("text"); t != choice.end()) {
      text = &*t;
    }
    if (text && text->is_string() && !text->get_ref<const std::string&>().empty()) {
      rec.chunk_s.push_back(now_s);
      if (answer) *answer += text->get_ref<const std::string&>();
    }
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    if (auto p = u->find("prompt_tokens"); p != u->end() && p->is_number_integer())
      rec.prompt_tokens = p->get<int64_t>();
    if (auto o = u->find("completion_tokens"); o != u->end() && o->is_number_integer()) {
      rec.output_tokens = o->get<int64_t>();
      rec.usage_reported = true;
    }
  }
  return false;
}

ServeRun run_serve(const std::vector<ServeConversation>& convs, const ServeRunOptions& opt) {
  Scraper scraper(opt);
  scraper.start();
  Driver driver(convs, opt);
  ServeRun run = driver.run();
  run.server = scraper.finish();
  return run;
}

std::optional<int64_t> count_tokens_remote(const std::string& base_url, const std::string& model,
                                           const std::string& text) {
  // Which endpoint answered, per server: 1 /tokenize, 2 /extras/tokenize, -1 none.
  static std::mutex mu;
  static std::map<std::string, int> known;
  int which = 0;
  {
    std::lock_guard<std::mutex> lk(mu);
    which = known[base_url];
  }
  auto remember = [&](int w) {
    std::lock_guard<std::mutex> lk(mu);
    known[base_url] = w;
  };
  const net::Url url = net::parse_url(base_url);
  auto try_loom = [&]() -> std::optional<int64_t> {
    nlohmann::json body = {{"prompt", text}, {"add_special_tokens", false}};
    if (!model.empty()) body["model"] = model;
    auto r = net::http_request(url, "POST", "/tokenize", body.dump(), 30);
    if (r.status != 200) return std::nullopt;
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (j.is_object() && j.contains("count") && j["count"].is_number_integer())
      return j["count"].get<int64_t>();
    if (j.is_object() && j.contains("tokens") && j["tokens"].is_array())
      return int64_t(j["tokens"].size());
    return std::nullopt;
  };
  auto try_llamacpp = [&]() -> std::optional<int64_t> {
    nlohmann::json body = {{"input", text}};
    if (!model.empty()) body["model"] = model;
    auto r = net::http_request(url, "POST", "/extras/tokenize", body.dump(), 30);
    if (r.status != 200) return std::nullopt;
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (j.is_object() && j.contains("tokens") && j["tokens"].is_array())
      return int64_t(j["tokens"].size());
    return std::nullopt;
  };
  if (which == 1) return try_loom();
  if (which == 2) return try_llamacpp();
  if (which == -1) return std::nullopt;
  if (auto n = try_loom()) {
    remember(1);
    return n;
  }
  if (auto n = try_llamacpp()) {
    remember(2);
    return n;
  }
  remember(-1);
  return std::nullopt;
}

std::string first_model(const std::string& base_url, const std::string& api_key) {
  std::vector<std::pair<std::string, std::string>> headers;
  if (!api_key.empty()) headers.push_back({"Authorization", "Bearer " + api_key});
  auto r = net::http_request(net::parse_url(base_url), "GET", "/v1/models", "", 30, headers);
  if (r.status != 200) return "";
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty())
    return "";
  const auto& m = j["data"][0];
  return m.contains("id") && m["id"].is_string() ? m["id"].get<std::string>() : "";
}

}  // namespace loom::bench
