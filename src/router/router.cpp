// Router: request forwarding, the health/scrape loop and the router's own
// metrics; see router.h. The upstream io_context runs on one thread; Proxy
// state marked "upstream thread" is touched only there (the first attempt
// runs on an HTTP worker before any upstream handler of that request exists).
#include "router/router.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <future>
#include <list>
#include <optional>
#include <thread>

#include "core/error.h"
#include "net/prometheus_text.h"
#include "router/prefix_key.h"
#include "server/api_error.h"
#include "server/json_body.h"

namespace loom::router {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kMaxJsonDepth = 128;

bool proxied_route(const std::string& path) {
  return path == "/v1/completions" || path == "/v1/chat/completions" || path == "/tokenize" ||
         path == "/detokenize" || path == "/v1/models" || path.rfind("/v1/models/", 0) == 0;
}

// Request headers that describe this hop only, or that the client sets anew.
bool forwardable_request_header(const std::string& lower_name) {
  static constexpr std::array<std::string_view, 11> kDrop = {
      "connection",          "keep-alive", "proxy-connection",
      "proxy-authorization", "te",         "trailer",
      "transfer-encoding",   "upgrade",    "host",
      "content-length",      "expect"};
  return std::find(kDrop.begin(), kDrop.end(), lower_name) == kDrop.end();
}

server::HttpResponse json_response(int status, std::string body) {
  server::HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

server::HttpResponse error_response(int status, const std::string& message) {
  auto r =
      json_response(status, server::error_body(message, server::error_type_for_status(status), ""));
  if (status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

// Load figures from a replica's /metrics (loom serve's names, server/metrics
// in openai_server.cpp); nullopt when none of them is there.
std::optional<ReplicaStats> parse_replica_stats(const std::string& text) {
  ReplicaStats s;
  bool any = false;
  for (const auto& sample : ::loom::net::parse_prometheus(text)) {
    if (!sample.labels.empty()) continue;
    if (sample.name == "loom_num_requests_running")
      s.running = sample.value, any = true;
    else if (sample.name == "loom_num_requests_waiting")
      s.waiting = sample.value, any = true;
    else if (sample.name == "loom_kv_cache_usage_ratio")
      s.kv_usage = sample.value, any = true;
  }
  return any ? std::optional<ReplicaStats>(s) : std::nullopt;
}

std::string metrics_route(const std::string& path) {
  return path.rfind("/v1/models", 0) == 0 ? "/v1/models" : path;
}

}  // namespace

class Proxy;

struct Router::Impl {
  RouterConfig cfg;
  net::io_context io{1};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> guard;
  UpstreamClient client;
  ReplicaSet replicas;
  server::Metrics metrics;
  net::steady_timer health_timer{io};
  tcp::resolver dns{io};
  std::thread thread;
  std::atomic<uint64_t> requests{0};
  std::atomic<bool> draining{false};

  std::mutex open_mu;
  std::list<std::weak_ptr<Proxy>> open;  // proxies not yet answered
  std::atomic<size_t> num_open{0};

  explicit Impl(RouterConfig c)
      : cfg(std::move(c)), client(io, cfg.upstream), replicas(cfg.policy) {
    declare_metrics();
  }

  void declare_metrics();
  void refresh_gauges();
  void forget(const std::vector<std::string>& removed);
  void health_round(std::function<void()> done);  // upstream thread
  void check_all(std::function<void()> done);
  void check_one(const std::shared_ptr<Replica>& r, std::function<void()> done);
  void report(const std::shared_ptr<Replica>& r, int status, const std::string& error,
              const std::function<void()>& done);
  void schedule_health();
};

// One client request on its way through a replica (or several, on retry).
class Proxy : public std::enable_shared_from_this<Proxy> {
 public:
  Proxy(Router::Impl& router, std::shared_ptr<server::ResponseSink> sink, std::string path,
        UpstreamRequest request, std::optional<uint64_t> key, uint64_t tie_break)
      : router_(router),
        sink_(std::move(sink)),
        route_(metrics_route(path)),
        request_(std::move(request)),
        key_(key),
        tie_break_(tie_break),
        t0_(Clock::now()) {}

  // Picks a replica (excluding those tried) and sends the request there.
  void attempt() {
    auto pick = router_.replicas.pick(key_ ? &*key_ : nullptr, tie_break_, tried_);
    if (!pick) {
      if (tried_.empty()) return reply_error(503, "no replica is available");
      return reply_error(502, fmt::format("replica {} failed: {}", tried_.back(), last_error_));
    }
    replica_ = pick->replica;
    tried_.push_back(replica_->url);
    router_.metrics.inc("loom_router_routing_decisions_total",
                        {{"decision", route_kind_name(pick->kind)}});
    UpstreamHandlers h;
    auto self = shared_from_this();
    h.on_head = [self](int status, server::HttpHeaders headers, std::optional<uint64_t> length) {
      return self->on_head(status, std::move(headers), length);
    };
    h.on_body = [self](std::string_view piece) { self->on_body(piece); };
    h.on_done = [self](UpstreamOutcome outcome, const std::string& error) {
      self->on_done(outcome, error);
    };
    uint64_t attempt_id;
    {
      std::lock_guard<std::mutex> lk(mu_);
      attempt_id = ++attempts_;
    }
    auto call = router_.client.start(replica_->host, replica_->port, request_, std::move(h));
    bool gone;
    {
      // The call may have failed and been retried on the upstream thread already.
      std::lock_guard<std::mutex> lk(mu_);
      if (attempts_ == attempt_id) call_ = call;
      gone = client_gone_ || aborting_;
    }
    if (gone) call->abort();
  }

  // From the client connection (it went away) or the drain (abort_all).
  void abort(bool client_gone) {
    std::shared_ptr<UpstreamCall> call;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (client_gone)
        client_gone_ = true;
      else
        aborting_ = true;
      call = call_;
    }
    if (call) call->abort();
  }

 private:
  bool retries_left() const { return int(tried_.size()) <= router_.cfg.max_retries; }

  bool on_head(int status, server::HttpHeaders headers, std::optional<uint64_t> length) {
    // A replica that is draining or whose queue is full: another may have room.
    if (status == 503 && retries_left() && router_.replicas.any_up(tried_)) {
      declined_ = true;
      return false;
    }
    status_ = status;
    buffered_ = length && *length <= router_.cfg.max_buffered_response;
    std::erase_if(headers, [&](const auto& h) {
      if (ascii_iequals(h.first, "content-type")) {
        content_type_ = h.second;
        return true;
      }
      return !buffered_ && ascii_iequals(h.first, "cache-control");  // begin_stream sets it
    });
    headers_ = std::move(headers);
    if (buffered_) {
      body_.reserve(size_t(*length));
    } else {
      sink_->begin_stream(status, content_type_, headers_);
      streaming_ = true;
    }
    return true;
  }

  void on_body(std::string_view piece) {
    if (buffered_)
      body_.append(piece);
    else
      sink_->write(std::string(piece));
  }

  void on_done(UpstreamOutcome outcome, const std::string& error) {
    router_.replicas.release(*replica_);
    bool client_gone, aborting;
    {
      std::lock_guard<std::mutex> lk(mu_);
      call_.reset();
      client_gone = client_gone_;
      aborting = aborting_;
    }
    if (outcome != UpstreamOutcome::Ok && outcome != UpstreamOutcome::Aborted)
      router_.metrics.inc("loom_router_upstream_errors_total",
                          {{"backend", replica_->url}, {"kind", outcome_name(outcome)}});
    switch (outcome) {
      case UpstreamOutcome::Ok:
        if (buffered_)
          sink_->send(server::HttpResponse{status_, content_type_, std::move(body_), headers_});
        else
          sink_->end_stream();
        return record(status_);
      case UpstreamOutcome::Aborted:
        if (client_gone) {
          router_.metrics.inc("loom_router_client_disconnects_total");
          return record(499);
        }
        if (declined_ && !aborting) {
          declined_ = false;
          last_error_ = "HTTP 503";
          return retry("unavailable");
        }
        if (streaming_) {
          sink_->end_stream();
          return record(status_);
        }
        return reply_error(503, "the router is shutting down");
      case UpstreamOutcome::ConnectFailed:
        if (router_.replicas.mark_down(*replica_, error))
          spdlog::warn("router: replica {} is down: {}", replica_->url, error);
        [[fallthrough]];
      case UpstreamOutcome::NoResponse:
        last_error_ = error;
        if (client_gone) return record(499);
        return retry(outcome_name(outcome));
      case UpstreamOutcome::Broken:
        spdlog::warn("router: replica {} broke off a response: {}", replica_->url, error);
        if (streaming_) {
          sink_->end_stream();
          return record(status_);
        }
        last_error_ = error;
        return reply_error(502, fmt::format("replica {} failed: {}", replica_->url, error));
    }
  }

  void retry(const char* reason) {
    if (!retries_left() || aborting_) {
      return reply_error(502, fmt::format("replica {} failed: {}", tried_.back(), last_error_));
    }
    router_.metrics.inc("loom_router_retries_total", {{"reason", reason}});
    streaming_ = buffered_ = false;
    body_.clear();
    content_type_.clear();
    headers_.clear();
    attempt();
  }

  void reply_error(int status, const std::string& message) {
    sink_->send(error_response(status, message));
    record(status);
  }

  // The request is answered: metrics, access log, drain count.
  void record(int status) {
    const std::string backend = replica_ ? replica_->url : "none";
    router_.metrics.inc(
        "loom_router_requests_total",
        {{"backend", backend}, {"route", route_}, {"status", std::to_string(status)}});
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0_).count();
    spdlog::info("router: {} {} -> {} {} {:.1f}ms{}", request_.method, route_, backend, status, ms,
                 tried_.size() > 1 ? fmt::format(" (tries {})", tried_.size()) : "");
    --router_.num_open;
  }

  static bool ascii_iequals(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) ==
                    std::tolower(static_cast<unsigned char>(y));
           });
  }

  Router::Impl& router_;
  std::shared_ptr<server::ResponseSink> sink_;
  std::string route_;
  UpstreamRequest request_;
  std::optional<uint64_t> key_;
  uint64_t tie_break_;
  Clock::time_point t0_;

  std::mutex
      mu_;  // call_ and the abort flags: the client side and the drain come from other threads
  std::shared_ptr<UpstreamCall> call_;
  uint64_t attempts_ = 0;
  bool client_gone_ = false;
  bool aborting_ = false;

  // Upstream thread (and the first attempt).
  std::vector<std::string> tried_;
  std::shared_ptr<Replica> replica_;
  std::string last_error_;
  bool declined_ = false;
  bool buffered_ = false;
  bool streaming_ = false;
  int status_ = 0;
  std::string content_type_;
  server::HttpHeaders headers_;
  std::string body_;
};

void Router::Impl::declare_metrics() {
  auto& m = metrics;
  m.declare_counter("loom_router_requests_total",
                    "requests answered, by replica, route and status");
  m.declare_counter("loom_router_routing_decisions_total",
                    "replica choices: affinity (the prefix's replica), spill (it was overloaded), "
                    "balance (no prefix: least loaded)");
  m.declare_counter("loom_router_retries_total",
                    "requests sent again to another replica, by reason");
  m.declare_counter("loom_router_upstream_errors_total",
                    "failed calls to replicas, by replica and kind");
  m.declare_counter("loom_router_client_disconnects_total",
                    "clients gone before their answer ended");
  m.declare_counter("loom_router_health_checks_total", "health checks, by replica and result");
  m.declare_gauge("loom_router_backend_up", "1 while the replica is in rotation");
  m.declare_gauge("loom_router_backend_in_flight", "requests the router has open on the replica");
  m.declare_gauge("loom_router_backend_running", "the replica's running sequences (last scrape)");
  m.declare_gauge("loom_router_backend_waiting", "the replica's waiting sequences (last scrape)");
  m.declare_gauge("loom_router_backend_kv_cache_usage_ratio",
                  "the replica's KV usage (last scrape)");
  m.declare_gauge("loom_router_backends", "replicas known (static list or DNS)");
  m.declare_gauge("loom_router_requests_in_flight", "requests being answered");
}

void Router::Impl::refresh_gauges() {
  const auto view = replicas.view();
  for (const auto& r : view) {
    const server::Labels l = {{"backend", r.url}};
    metrics.set("loom_router_backend_up", r.up ? 1 : 0, l);
    metrics.set("loom_router_backend_in_flight", double(r.in_flight), l);
    metrics.set("loom_router_backend_running", r.stats.running, l);
    metrics.set("loom_router_backend_waiting", r.stats.waiting, l);
    metrics.set("loom_router_backend_kv_cache_usage_ratio", r.stats.kv_usage, l);
  }
  metrics.set("loom_router_backends", double(view.size()));
  metrics.set("loom_router_requests_in_flight", double(num_open.load()));
}

void Router::Impl::forget(const std::vector<std::string>& removed) {
  for (const auto& url : removed) {
    spdlog::info("router: replica {} left the set", url);
    const server::Labels l = {{"backend", url}};
    for (const char* g :
         {"loom_router_backend_up", "loom_router_backend_in_flight", "loom_router_backend_running",
          "loom_router_backend_waiting", "loom_router_backend_kv_cache_usage_ratio"})
      metrics.set(g, 0, l);
  }
}

void Router::Impl::health_round(std::function<void()> done) {
  if (cfg.backends_dns.empty()) return check_all(std::move(done));
  const size_t colon = cfg.backends_dns.rfind(':');
  const std::string name = cfg.backends_dns.substr(0, colon),
                    port = cfg.backends_dns.substr(colon + 1);
  dns.async_resolve(name, port,
                    [this, name, port, done = std::move(done)](
                        boost::system::error_code ec, tcp::resolver::results_type results) {
                      if (ec) {
                        spdlog::warn("router: cannot resolve {}: {} (keeping {} replicas)", name,
                                     ec.message(), replicas.replicas().size());
                      } else {
                        std::vector<std::string> urls;
                        for (const auto& entry : results) {
                          const auto addr = entry.endpoint().address();
                          urls.push_back(addr.is_v6()
                                             ? fmt::format("http://[{}]:{}", addr.to_string(), port)
                                             : fmt::format("http://{}:{}", addr.to_string(), port));
                        }
                        std::sort(urls.begin(), urls.end());
                        const auto before = replicas.replicas().size();
                        forget(replicas.assign(urls));
                        if (urls.size() != before)
                          spdlog::info("router: {} resolves to {} replicas", name, urls.size());
                      }
                      check_all(done);
                    });
}

void Router::Impl::check_all(std::function<void()> done) {
  auto list = replicas.replicas();
  if (list.empty()) return done();
  auto pending = std::make_shared<size_t>(list.size());
  for (const auto& r : list)
    check_one(r, [pending, done] {
      if (--*pending == 0) done();
    });
}

void Router::Impl::check_one(const std::shared_ptr<Replica>& r, std::function<void()> done) {
  client.fetch(r->host, r->port, "/ready", cfg.health_timeout,
               [this, r, done = std::move(done)](int status, std::string, std::string error) {
                 if (status != 404) return report(r, status, error, done);
                 // A server without /ready (not loom): its /health decides.
                 client.fetch(r->host, r->port, "/health", cfg.health_timeout,
                              [this, r, done](int status, std::string, std::string error) {
                                report(r, status, error, done);
                              });
               });
}

void Router::Impl::report(const std::shared_ptr<Replica>& r, int status, const std::string& error,
                          const std::function<void()>& done) {
  if (status != 200) {
    const std::string reason = status == 0 ? error : fmt::format("not ready: HTTP {}", status);
    if (replicas.report_health(*r, false, std::nullopt, reason))
      spdlog::warn("router: replica {} is down: {}", r->url, reason);
    metrics.inc("loom_router_health_checks_total", {{"backend", r->url}, {"result", "down"}});
    return done();
  }
  client.fetch(
      r->host, r->port, "/metrics", cfg.health_timeout,
      [this, r, done](int status, std::string body, std::string) {
        if (!replicas.report_health(*r, true,
                                    status == 200 ? parse_replica_stats(body) : std::nullopt))
          spdlog::info("router: replica {} is up", r->url);
        metrics.inc("loom_router_health_checks_total", {{"backend", r->url}, {"result", "up"}});
        done();
      });
}

void Router::Impl::schedule_health() {
  health_timer.expires_after(cfg.health_interval);
  health_timer.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    health_round([this] { schedule_health(); });
  });
}

Router::Router(RouterConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {
  Impl& s = *impl_;
  if (s.cfg.backends.empty() && s.cfg.backends_dns.empty())
    LOOM_THROW("give the replicas: --backends URL,URL... or --backends-dns NAME:PORT");
  if (!s.cfg.backends_dns.empty()) {
    const size_t colon = s.cfg.backends_dns.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == s.cfg.backends_dns.size() ||
        s.cfg.backends_dns.find_first_not_of("0123456789", colon + 1) != std::string::npos)
      LOOM_THROW("--backends-dns '{}' must be NAME:PORT", s.cfg.backends_dns);
  }
  s.forget(s.replicas.assign(s.cfg.backends));
  s.guard.emplace(net::make_work_guard(s.io));
  s.thread = std::thread([&s] { s.io.run(); });
  net::post(s.io, [&s] { s.health_round([&s] { s.schedule_health(); }); });
}

Router::~Router() {
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> lk(s.open_mu);
    for (auto& w : s.open)
      if (auto p = w.lock()) p->abort(false);
  }
  net::post(s.io, [&s] {
    s.health_timer.cancel();
    s.dns.cancel();
  });
  s.guard.reset();
  s.io.stop();
  if (s.thread.joinable()) s.thread.join();
}

void Router::handle(server::HttpRequest req, std::shared_ptr<server::ResponseSink> sink) {
  Impl& s = *impl_;
  const std::string path = req.path();
  if (path == "/health") return sink->send(json_response(200, R"({"status":"ok"})"));
  if (path == "/ready") {
    const auto view = s.replicas.view();
    const auto up = std::count_if(view.begin(), view.end(), [](const auto& v) { return v.up; });
    if (up == 0 || s.draining)
      return sink->send(error_response(503, s.draining ? "draining" : "no replica is up"));
    return sink->send(json_response(
        200,
        fmt::format(R"({{"status":"ready","replicas_up":{},"replicas":{}}})", up, view.size())));
  }
  if (path == "/metrics") {
    s.refresh_gauges();
    server::HttpResponse r;
    r.content_type = "text/plain; version=0.0.4";
    r.body = s.metrics.render();
    return sink->send(std::move(r));
  }
  if (!proxied_route(path)) return sink->send(error_response(404, "no route " + path));
  if (s.draining) return sink->send(error_response(503, "the router is shutting down"));

  std::optional<uint64_t> key;
  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    try {
      const auto body = server::parse_json_body(req.body, req.body.size() + 1, kMaxJsonDepth);
      if (auto prefix = routing_prefix(path, body, s.cfg.prefix_chars)) key = hash_key(*prefix);
    } catch (const std::exception&) {
      // Not a valid body: any replica will say why.
    }
  }
  UpstreamRequest up;
  up.method = req.method;
  up.target = req.target;
  for (auto& [name, value] : req.headers)
    if (forwardable_request_header(name)) up.headers.emplace_back(name, value);
  if (!req.remote.empty()) {
    const std::string prior = req.header("x-forwarded-for");
    std::erase_if(up.headers, [](const auto& h) { return h.first == "x-forwarded-for"; });
    up.headers.emplace_back("x-forwarded-for",
                            prior.empty() ? req.remote : prior + ", " + req.remote);
  }
  up.body = std::move(req.body);

  auto proxy = std::make_shared<Proxy>(s, sink, path, std::move(up), key, s.requests++);
  ++s.num_open;
  {
    std::lock_guard<std::mutex> lk(s.open_mu);
    std::erase_if(s.open, [](const auto& w) { return w.expired(); });
    s.open.push_back(proxy);
  }
  sink->on_close([weak = std::weak_ptr<Proxy>(proxy)] {
    if (auto p = weak.lock()) p->abort(true);
  });
  proxy->attempt();
}

server::DrainHooks Router::drain_hooks() {
  Impl* s = impl_.get();
  server::DrainHooks hooks;
  hooks.begin = [s] { s->draining = true; };
  hooks.in_flight = [s] { return s->num_open.load(); };
  hooks.abort_all = [s] {
    std::lock_guard<std::mutex> lk(s->open_mu);
    for (auto& w : s->open)
      if (auto p = w.lock()) p->abort(false);
  };
  return hooks;
}

void Router::check_health_now() {
  auto done = std::make_shared<std::promise<void>>();
  auto fut = done->get_future();
  net::post(impl_->io, [s = impl_.get(), done] { s->health_round([done] { done->set_value(); }); });
  fut.wait_for(impl_->cfg.health_timeout * 3 + std::chrono::seconds(1));
}

std::vector<ReplicaView> Router::replicas() const {
  return impl_->replicas.view();
}

const server::Metrics& Router::metrics() const {
  return impl_->metrics;
}

}  // namespace loom::router
