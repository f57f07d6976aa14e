// Boost.Beast HTTP/1.1 server. Threads: `io_threads` run the io_context; every
// connection's handlers run on its own strand. Handlers run on a worker pool
// and answer through a ResponseSink, which posts bytes to the connection's
// strand (never blocking the caller, e.g. the engine thread). While a request
// is in flight the connection keeps one read outstanding to notice a client
// that goes away (then the sink's close callback aborts the work).
#include "server/http_server.h"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "core/error.h"
#include "server/api_error.h"

namespace loom::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

std::string response_head(int status, const std::string& content_type, const HttpHeaders& headers,
                          std::optional<size_t> content_length, bool keep_alive) {
  std::string reason(http::obsolete_reason(http::int_to_status(unsigned(status))));
  std::string out = fmt::format("HTTP/1.1 {} {}\r\nServer: loom\r\n", status, reason);
  if (!content_type.empty()) out += "Content-Type: " + content_type + "\r\n";
  for (const auto& [k, v] : headers) out += k + ": " + v + "\r\n";
  if (content_length) out += fmt::format("Content-Length: {}\r\n", *content_length);
  else out += "Transfer-Encoding: chunked\r\n";
  out += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return out;
}

std::string serialize(const HttpResponse& r, bool keep_alive) {
  return response_head(r.status, r.content_type, r.headers, r.body.size(), keep_alive) + r.body;
}

std::string error_response(int status, const std::string& message, bool keep_alive) {
  HttpResponse r;
  r.status = status;
  r.body = error_body(message, error_type_for_status(status), "");
  return serialize(r, keep_alive);
}

}  // namespace

class Connection;

struct HttpServer::Impl {
  HttpServerConfig cfg;
  RequestHandler handler;
  DrainHooks drain;
  net::io_context ioc;
  net::thread_pool workers;
  tcp::acceptor acceptor;
  net::signal_set signals;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> guard;
  std::atomic<size_t> connections{0};
  std::atomic<bool> stopping{false};
  std::thread drain_thread;

  Impl(HttpServerConfig c, RequestHandler h, DrainHooks d)
      : cfg(std::move(c)),
        handler(std::move(h)),
        drain(std::move(d)),
        ioc(std::max(1, cfg.io_threads)),
        workers(size_t(std::max(1, cfg.worker_threads))),
        acceptor(ioc),
        signals(ioc) {}

  void do_accept();
  void begin_shutdown();
};

// One client connection; all members are touched on its strand only.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, HttpServer::Impl& server)
      : stream_(std::move(socket)), server_(server) {}
  ~Connection() { --server_.connections; }

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->do_read(); });
  }
  net::any_io_executor executor() { return stream_.get_executor(); }

  // Strand only (sinks post here).
  void enqueue(uint64_t exchange, std::string bytes, bool last) {
    if (closed_ || exchange != exchange_ || !exchange_active_) return;
    queued_bytes_ += bytes.size();
    out_.push_back(std::move(bytes));
    if (last) end_pending_ = true;
    if (queued_bytes_ > server_.cfg.max_queued_bytes) {
      spdlog::warn("http: dropping a connection whose reader is too slow ({} bytes queued)",
                   queued_bytes_);
      close();
      return;
    }
    if (!writing_) do_write();
  }
  void register_close(uint64_t exchange, std::function<void()> cb) {
    if (exchange != exchange_) return;  // that exchange already ended normally
    if (closed_) {
      if (exchange_active_ || end_pending_) cb();
      return;
    }
    if (exchange_active_) close_cb_ = std::move(cb);
  }

 private:
  void do_read() {
    if (closed_) return;
    parser_.emplace();
    parser_->body_limit(server_.cfg.max_body_bytes);
    parser_->header_limit(uint32_t(server_.cfg.max_header_bytes));
    stream_.expires_after(server_.cfg.idle_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              self->on_header(ec);
                            });
  }

  // Answers a request that could not be read, then closes.
  void reject(int status, const std::string& message) {
    keep_alive_ = false;
    ++exchange_;
    exchange_active_ = true;
    enqueue(exchange_, error_response(status, message, false), true);
  }

  bool read_failed(beast::error_code ec) {
    if (!ec) return false;
    if (ec == http::error::body_limit)
      reject(413, fmt::format("request body exceeds {} bytes", server_.cfg.max_body_bytes));
    else if (ec == http::error::header_limit)
      reject(431, "request headers too large");
    else if (ec.category() == beast::error_code(http::error::end_of_stream).category() &&
             ec != http::error::end_of_stream && ec != http::error::partial_message)
      reject(400, "malformed HTTP request");
    else
      close();
    return true;
  }

  void on_header(beast::error_code ec) {
    if (read_failed(ec)) return;
    auto& msg = parser_->get();
    if (auto len = parser_->content_length(); len && *len > server_.cfg.max_body_bytes) {
      reject(413, fmt::format("request body of {} bytes exceeds {} bytes", *len,
                              server_.cfg.max_body_bytes));
      return;
    }
    auto read_body = [self = shared_from_this()] {
      http::async_read(self->stream_, self->buffer_, *self->parser_,
                       [self](beast::error_code ec, size_t) { self->on_read(ec); });
    };
    if (beast::iequals(msg[http::field::expect], "100-continue") && !parser_->is_done()) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(stream_, net::buffer(kContinue),
                       [self = shared_from_this(), read_body](beast::error_code ec, size_t) {
                         if (ec) return self->close();
                         read_body();
                       });
      return;
    }
    read_body();
  }

  void on_read(beast::error_code ec) {
    if (read_failed(ec)) return;
    auto msg = parser_->release();
    HttpRequest req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    for (const auto& f : msg) {
      std::string name(f.name_string());
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return char(std::tolower(c)); });
      req.headers[name] = std::string(f.value());
    }
    req.body = std::move(msg.body());
    beast::error_code ignored;
    auto ep = stream_.socket().remote_endpoint(ignored);
    if (!ignored) req.remote = ep.address().to_string();
    keep_alive_ = msg.keep_alive();
    stream_.expires_never();
    ++exchange_;
    exchange_active_ = true;
    start_watch();
    auto sink = make_sink();
    net::post(server_.workers, [this_server = &server_, req = std::move(req), sink]() mutable {
      try {
        this_server->handler(std::move(req), sink);
      } catch (const std::exception& e) {
        spdlog::error("http: handler failed: {}", e.what());
        sink->send(HttpResponse{500, "application/json",
                                error_body("internal error", "server_error", ""), {}});
      }
    });
  }

  std::shared_ptr<ResponseSink> make_sink();

  // Keeps one read outstanding during an exchange: EOF or an error means the
  // client went away; bytes (a pipelined request) are kept for the next read.
  void start_watch() {
    if (watching_ || closed_) return;
    if (buffer_.size() >= server_.cfg.max_header_bytes + server_.cfg.max_body_bytes) return;
    watching_ = true;
    stream_.socket().async_read_some(
        buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
          self->on_watch(ec, n);
        });
  }

  void on_watch(beast::error_code ec, size_t n) {
    watching_ = false;
    if (closed_) return;
    if (!ec) {
      buffer_.commit(n);
      if (exchange_active_) start_watch();
      else do_read();
      return;
    }
    if (ec == net::error::operation_aborted) {
      if (!exchange_active_) do_read();
      return;
    }
    close();  // EOF, reset: the client is gone
  }

  void do_write() {
    writing_ = true;
    batch_.assign(std::make_move_iterator(out_.begin()), std::make_move_iterator(out_.end()));
    out_.clear();
    finishing_ = end_pending_;
    std::vector<net::const_buffer> bufs;
    bufs.reserve(batch_.size());
    for (const auto& b : batch_) bufs.emplace_back(net::buffer(b));
    net::async_write(stream_.socket(), bufs,
                     [self = shared_from_this()](beast::error_code ec, size_t n) {
                       self->on_write(ec, n);
                     });
  }

  void on_write(beast::error_code ec, size_t n) {
    writing_ = false;
    queued_bytes_ -= std::min(queued_bytes_, n);
    batch_.clear();
    if (ec) return close();
    if (!out_.empty()) return do_write();
    if (finishing_) finish_exchange();
  }

  void finish_exchange() {
    end_pending_ = finishing_ = false;
    exchange_active_ = false;
    close_cb_ = nullptr;
    if (!keep_alive_ || server_.stopping) {
      beast::error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      closed_ = true;
      stream_.socket().close(ignored);
      return;
    }
    if (watching_) {
      beast::error_code ignored;
      stream_.socket().cancel(ignored);  // on_watch then starts the next read
    } else {
      do_read();
    }
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    if (auto cb = std::move(close_cb_)) {
      close_cb_ = nullptr;
      cb();
    }
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  HttpServer::Impl& server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::deque<std::string> out_;
  std::vector<std::string> batch_;   // being written
  size_t queued_bytes_ = 0;
  uint64_t exchange_ = 0;
  bool exchange_active_ = false;
  bool end_pending_ = false;          // the exchange's last bytes are queued
  bool finishing_ = false;            // ... and in the write in progress
  bool writing_ = false;
  bool watching_ = false;
  bool keep_alive_ = true;
  bool closed_ = false;
  std::function<void()> close_cb_;
};

namespace {

class Sink : public ResponseSink {
 public:
  Sink(std::shared_ptr<Connection> conn, uint64_t exchange, bool keep_alive)
      : conn_(std::move(conn)), exchange_(exchange), keep_alive_(keep_alive) {}
  ~Sink() override {
    std::lock_guard<std::mutex> lk(mu_);
    if (ended_) return;
    if (streaming_) post("0\r\n\r\n", true);
    else post(error_response(500, "no response", keep_alive_), true);
  }

  void send(HttpResponse r) override {
    std::lock_guard<std::mutex> lk(mu_);
    if (ended_ || streaming_) return;
    ended_ = true;
    post(serialize(r, keep_alive_), true);
  }
  void begin_stream(int status, std::string content_type, HttpHeaders headers) override {
    std::lock_guard<std::mutex> lk(mu_);
    if (ended_ || streaming_) return;
    streaming_ = true;
    headers.emplace_back("Cache-Control", "no-cache");
    post(response_head(status, content_type, headers, std::nullopt, keep_alive_), false);
  }
  void write(std::string chunk) override {
    if (chunk.empty()) return;
    std::lock_guard<std::mutex> lk(mu_);
    if (!streaming_ || ended_) return;
    post(fmt::format("{:x}\r\n", chunk.size()) + chunk + "\r\n", false);
  }
  void end_stream() override {
    std::lock_guard<std::mutex> lk(mu_);
    if (!streaming_ || ended_) return;
    ended_ = true;
    post("0\r\n\r\n", true);
  }
  void on_close(std::function<void()> callback) override {
    net::post(conn_->executor(), [c = conn_, ex = exchange_, cb = std::move(callback)]() mutable {
      c->register_close(ex, std::move(cb));
    });
  }

 private:
  // mu_ held: posts keep the order of calls.
  void post(std::string bytes, bool last) {
    net::post(conn_->executor(), [c = conn_, ex = exchange_, b = std::move(bytes), last]() mutable {
      c->enqueue(ex, std::move(b), last);
    });
  }

  std::shared_ptr<Connection> conn_;
  uint64_t exchange_;
  bool keep_alive_;
  std::mutex mu_;
  bool ended_ = false;
  bool streaming_ = false;
};

}  // namespace

std::shared_ptr<ResponseSink> Connection::make_sink() {
  return std::make_shared<Sink>(shared_from_this(), exchange_, keep_alive_);
}

void HttpServer::Impl::do_accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (!acceptor.is_open()) return;
    if (ec) {
      spdlog::warn("http: accept failed: {}", ec.message());
    } else if (connections.load() >= cfg.max_connections) {
      beast::error_code ignored;
      socket.close(ignored);
    } else {
      ++connections;
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      std::make_shared<Connection>(std::move(socket), *this)->start();
    }
    do_accept();
  });
}

void HttpServer::Impl::begin_shutdown() {
  if (stopping.exchange(true)) return;
  beast::error_code ignored;
  acceptor.close(ignored);
  signals.cancel(ignored);
  spdlog::info("http: shutting down: draining in-flight requests (up to {}s)",
               cfg.shutdown_timeout.count());
  if (drain.begin) drain.begin();
  drain_thread = std::thread([this] {
    auto in_flight = [this] { return drain.in_flight ? drain.in_flight() : size_t(0); };
    const auto deadline = std::chrono::steady_clock::now() + cfg.shutdown_timeout;
    while (in_flight() > 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (in_flight() > 0) {
      spdlog::warn("http: {} requests still running after {}s: aborting them", in_flight(),
                   cfg.shutdown_timeout.count());
      if (drain.abort_all) drain.abort_all();
      const auto hard = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (in_flight() > 0 && std::chrono::steady_clock::now() < hard)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // last bytes out
    guard.reset();
    ioc.stop();
  });
}

HttpServer::HttpServer(HttpServerConfig config, RequestHandler handler, DrainHooks drain)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(handler), std::move(drain))) {}

HttpServer::~HttpServer() {
  if (impl_->drain_thread.joinable()) impl_->drain_thread.join();
  impl_->workers.stop();
  impl_->workers.join();
}

void HttpServer::listen() {
  beast::error_code ec;
  auto address = net::ip::make_address(impl_->cfg.host, ec);
  if (ec) LOOM_THROW("bad --host '{}': {}", impl_->cfg.host, ec.message());
  tcp::endpoint ep(address, impl_->cfg.port);
  auto& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) LOOM_THROW("cannot listen on {}:{}: {}", impl_->cfg.host, impl_->cfg.port, ec.message());
}

uint16_t HttpServer::port() const {
  beast::error_code ec;
  auto ep = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : ep.port();
}

void HttpServer::run(bool handle_signals) {
  Impl& s = *impl_;
  s.guard.emplace(net::make_work_guard(s.ioc));
  if (handle_signals) {
    s.signals.add(SIGTERM);
    s.signals.add(SIGINT);
    s.signals.async_wait([&s](beast::error_code ec, int sig) {
      if (ec) return;
      spdlog::info("http: signal {} received", sig);
      s.begin_shutdown();
    });
  }
  s.do_accept();
  std::vector<std::thread> threads;
  for (int i = 1; i < s.cfg.io_threads; ++i) threads.emplace_back([&s] { s.ioc.run(); });
  s.ioc.run();
  for (auto& t : threads) t.join();
  if (s.drain_thread.joinable()) s.drain_thread.join();
}

void HttpServer::stop() {
  net::post(impl_->ioc, [this] { impl_->begin_shutdown(); });
}

}  // namespace loom::server
