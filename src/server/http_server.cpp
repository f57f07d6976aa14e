// Boost.Beast HTTP/1.1 server. Threads: `io_threads` run the io_context; every
// connection's handlers run on its own strand. Handlers run on a worker pool
// (or inline, for the routes the config marks cheap) and answer through a
// ResponseSink, which posts bytes to the connection's strand (never blocking
// the caller, e.g. the engine thread). The connection writes them with
// write_some calls, each under the write deadline. While a request is in
// flight the connection keeps one read outstanding to notice a client that
// goes away (then the sink's close callback aborts the work).
#include "server/http_server.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cerrno>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/open_files.h"
#include "server/api_error.h"

namespace loom::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// chunked: Transfer-Encoding: chunked (HTTP/1.1 streams); without it and
// without a length the body ends when the connection closes (HTTP/1.0).
std::string response_head(int status, const std::string& content_type, const HttpHeaders& headers,
                          std::optional<size_t> content_length, bool chunked, bool keep_alive) {
  std::string reason(http::obsolete_reason(http::int_to_status(unsigned(status))));
  std::string out = fmt::format("HTTP/1.1 {} {}\r\nServer: loom\r\n", status, reason);
  if (!content_type.empty()) out += "Content-Type: " + content_type + "\r\n";
  for (const auto& [k, v] : headers) out += k + ": " + v + "\r\n";
  if (content_length)
    out += fmt::format("Content-Length: {}\r\n", *content_length);
  else if (chunked)
    out += "Transfer-Encoding: chunked\r\n";
  out += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return out;
}

std::string serialize(const HttpResponse& r, bool keep_alive) {
  return response_head(r.status, r.content_type, r.headers, r.body.size(), false, keep_alive) +
         r.body;
}

std::string error_response(int status, const std::string& message, bool keep_alive,
                           HttpHeaders headers = {}) {
  HttpResponse r;
  r.status = status;
  r.body = error_body(message, error_type_for_status(status), "");
  r.headers = std::move(headers);
  return serialize(r, keep_alive);
}

std::string trimmed_lower(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  std::string out(v);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  return out;
}

// What a Sink hands the connection.
enum class Piece : uint8_t {
  Complete,    // a whole response (status, headers, body)
  StreamHead,  // status and headers of a streamed response
  StreamData,  // one piece of a streamed body, framed
  StreamEnd,   // the streamed body's end (the chunked terminator, or nothing)
};

constexpr size_t kMaxWriteBuffers = 64;  // per write call
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr size_t kLingerBytes = size_t(1) << 20;
constexpr size_t kLingerChunk = 16384;

}  // namespace

class Connection;

struct HttpServer::Impl {
  HttpServerConfig cfg;
  RequestHandler handler;
  DrainHooks drain;
  net::io_context ioc;
  net::thread_pool workers;
  // On a strand of its own: its accept handlers and begin_shutdown's close
  // never run at once (with several io threads they otherwise could, and an
  // accept started on an acceptor being closed crashes).
  tcp::acceptor acceptor;
  net::signal_set signals;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> guard;
  std::atomic<size_t> connections{0};
  std::atomic<size_t> queued_bytes{0};  // unsent, over all connections
  // Sink writes posted to a connection's strand and not yet queued there: a
  // shutdown drain waits for them as for queued bytes (the request that made
  // them may already have stopped counting as in flight).
  std::atomic<size_t> posted{0};
  std::atomic<bool> stopping{false};
  std::thread drain_thread;
  // Connections at once: cfg.max_connections, or fewer where the open-file
  // limit (raised by listen() as far as the hard limit allows) is lower.
  size_t connection_cap = 0;
  // An accept that failed (descriptors or memory exhausted) is retried after
  // a pause rather than at once: a failing accept loop would spin on a core
  // and flood the log while the connections in flight finish.
  net::steady_timer accept_retry;
  std::chrono::steady_clock::time_point accept_warned{};
  size_t accept_failures = 0;  // since the last warning

  Impl(HttpServerConfig c, RequestHandler h, DrainHooks d)
      : cfg(std::move(c)),
        handler(std::move(h)),
        drain(std::move(d)),
        ioc(std::max(1, cfg.io_threads)),
        workers(size_t(std::max(1, cfg.worker_threads))),
        acceptor(net::make_strand(ioc)),
        signals(ioc),
        accept_retry(acceptor.get_executor()) {
    connection_cap = cfg.max_connections;
  }

  void do_accept();
  void accept_failed(const beast::error_code& ec);
  void begin_shutdown();
};

// One client connection; all members are touched on its strand only.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, HttpServer::Impl& server)
      : stream_(std::move(socket)), write_timer_(stream_.get_executor()), server_(server) {}
  ~Connection() {
    release_queue();
    --server_.connections;
  }

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->do_read(); });
  }
  net::any_io_executor executor() { return stream_.get_executor(); }

  // Any thread (sinks): bytes to enqueue on the strand, counted in
  // server_.posted until they are.
  void post_enqueue(uint64_t exchange, std::string bytes, Piece piece) {
    ++server_.posted;
    net::post(executor(), [self = shared_from_this(), exchange, b = std::move(bytes), piece]() mutable {
      self->enqueue(exchange, std::move(b), piece);
      --self->server_.posted;
    });
  }

  // Strand only (sinks post here).
  void enqueue(uint64_t exchange, std::string bytes, Piece piece) {
    if (closed_ || exchange != exchange_ || !exchange_active_) return;
    const size_t limit = server_.cfg.max_total_queued_bytes;
    if (piece == Piece::Complete && server_.queued_bytes.load() + bytes.size() > limit) {
      spdlog::warn("http: {} unsent bytes over all connections: answering 503 instead of {} bytes",
                   server_.queued_bytes.load(), bytes.size());
      bytes = error_response(503, "the server's output buffers are full; retry later", keep_alive_,
                             {{"Retry-After", "1"}});
    }
    if (piece == Piece::StreamHead && http10_) keep_alive_ = false;  // the body ends at close
    queue(std::move(bytes));
    if (piece == Piece::Complete || piece == Piece::StreamEnd) end_pending_ = true;
    if (piece == Piece::StreamData &&
        (queued_bytes_ > server_.cfg.max_queued_bytes || server_.queued_bytes.load() > limit)) {
      spdlog::warn(
          "http: dropping a connection whose reader is too slow ({} bytes queued, {} "
          "over all connections)",
          queued_bytes_, server_.queued_bytes.load());
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
    enqueue(exchange_, error_response(status, message, false), Piece::Complete);
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

  // A request whose framing a proxy in front might read differently is
  // refused: the only transfer coding accepted is "chunked" alone, and never
  // together with Content-Length.
  bool bad_framing() {
    const auto& msg = parser_->get();
    const auto te = msg.find(http::field::transfer_encoding);
    if (te == msg.end()) return false;
    if (msg.count(http::field::transfer_encoding) > 1 || trimmed_lower(std::string_view(te->value().data(), te->value().size())) != "chunked") {
      reject(501, "unsupported Transfer-Encoding (only 'chunked' is accepted)");
      return true;
    }
    if (msg.find(http::field::content_length) != msg.end()) {
      reject(400, "a request must not carry both Transfer-Encoding and Content-Length");
      return true;
    }
    return false;
  }

  void on_header(beast::error_code ec) {
    if (read_failed(ec)) return;
    if (bad_framing()) return;
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
    http10_ = msg.version() < 11;
    stream_.expires_never();
    ++exchange_;
    exchange_active_ = true;
    auto sink = make_sink();
    if (server_.cfg.run_inline && server_.cfg.run_inline(req)) {
      run_handler(server_, std::move(req), sink);
      if (!closed_ && exchange_active_) start_watch();
      return;
    }
    start_watch();
    net::post(server_.workers, [this_server = &server_, req = std::move(req), sink]() mutable {
      run_handler(*this_server, std::move(req), sink);
    });
  }

  static void run_handler(HttpServer::Impl& server, HttpRequest req,
                          const std::shared_ptr<ResponseSink>& sink) {
    try {
      server.handler(std::move(req), sink);
    } catch (const std::exception& e) {
      spdlog::error("http: handler failed: {}", e.what());
      sink->send(HttpResponse{
          500, "application/json", error_body("internal error", "server_error", ""), {}});
    }
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

  void queue(std::string bytes) {
    if (bytes.empty()) return;
    queued_bytes_ += bytes.size();
    server_.queued_bytes += bytes.size();
    out_.push_back(std::move(bytes));
  }

  // Gives every unsent byte up (the connection is closing or gone). A write
  // in progress still points into out_: its handler frees the buffers.
  void release_queue() {
    server_.queued_bytes -= queued_bytes_;
    queued_bytes_ = 0;
    if (writing_) return;
    out_.clear();
    out_offset_ = 0;
  }

  // Writes what the socket takes now; each write that makes no progress
  // within write_timeout drops the connection.
  void do_write() {
    if (out_.empty()) {
      if (end_pending_) finish_exchange();
      return;
    }
    writing_ = true;
    std::vector<net::const_buffer> bufs;
    bufs.reserve(std::min(out_.size(), kMaxWriteBuffers));
    for (size_t i = 0; i < out_.size() && bufs.size() < kMaxWriteBuffers; ++i)
      bufs.push_back(net::buffer(out_[i]) + (i == 0 ? out_offset_ : 0));
    write_timer_.expires_after(server_.cfg.write_timeout);
    write_timer_.async_wait(
        [self = shared_from_this(), gen = ++write_generation_](beast::error_code ec) {
          if (ec || self->closed_ || !self->writing_ || gen != self->write_generation_) return;
          spdlog::warn("http: dropping a connection that read nothing for {}s ({} bytes unsent)",
                       self->server_.cfg.write_timeout.count(), self->queued_bytes_);
          self->close();
        });
    stream_.socket().async_write_some(
        bufs,
        [self = shared_from_this()](beast::error_code ec, size_t n) { self->on_write(ec, n); });
  }

  void on_write(beast::error_code ec, size_t n) {
    writing_ = false;
    write_timer_.cancel();
    if (closed_) {
      out_.clear();  // accounted for by release_queue already
      return;
    }
    if (ec) return close();
    server_.queued_bytes -= n;
    queued_bytes_ -= n;
    while (n > 0) {
      const size_t left = out_.front().size() - out_offset_;
      if (n < left) {
        out_offset_ += n;
        break;
      }
      n -= left;
      out_.pop_front();
      out_offset_ = 0;
    }
    do_write();
  }

  void finish_exchange() {
    end_pending_ = false;
    exchange_active_ = false;
    close_cb_ = nullptr;
    if (!keep_alive_ || server_.stopping) {
      linger();
      return;
    }
    if (watching_) {
      beast::error_code ignored;
      stream_.socket().cancel(ignored);  // on_watch then starts the next read
    } else {
      do_read();
    }
  }

  // Closes after the response: stops sending, then reads and discards what
  // the client still sends (briefly), so an unread request body does not
  // turn the close into a reset that destroys the response in flight.
  void linger() {
    closed_ = true;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    if (watching_) stream_.socket().cancel(ignored);
    stream_.expires_after(kLingerTime);
    discard(0);
  }
  void discard(size_t so_far) {
    if (!linger_buffer_) linger_buffer_ = std::make_unique<char[]>(kLingerChunk);
    stream_.async_read_some(net::buffer(linger_buffer_.get(), kLingerChunk),
                            [self = shared_from_this(), so_far](beast::error_code ec, size_t n) {
                              if (ec || so_far + n > kLingerBytes) {
                                beast::error_code ignored;
                                self->stream_.socket().close(ignored);
                                return;
                              }
                              self->discard(so_far + n);
                            });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    release_queue();
    write_timer_.cancel();
    if (auto cb = std::move(close_cb_)) {
      close_cb_ = nullptr;
      cb();
    }
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  net::steady_timer write_timer_;
  HttpServer::Impl& server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::deque<std::string> out_;  // unsent bytes; out_offset_ of the first already sent
  size_t out_offset_ = 0;
  size_t queued_bytes_ = 0;  // unsent bytes in out_
  uint64_t exchange_ = 0;
  uint64_t write_generation_ = 0;
  bool exchange_active_ = false;
  bool end_pending_ = false;  // the exchange's last bytes are queued
  bool writing_ = false;
  bool watching_ = false;
  bool keep_alive_ = true;
  bool http10_ = false;  // the exchange's request was HTTP/1.0
  bool closed_ = false;
  std::function<void()> close_cb_;
  std::unique_ptr<char[]> linger_buffer_;
};

namespace {

class Sink : public ResponseSink {
 public:
  Sink(std::shared_ptr<Connection> conn, uint64_t exchange, bool keep_alive, bool http10)
      : conn_(std::move(conn)), exchange_(exchange), keep_alive_(keep_alive), http10_(http10) {}
  ~Sink() override {
    std::lock_guard<std::mutex> lk(mu_);
    if (ended_) return;
    if (streaming_)
      post(stream_end(), Piece::StreamEnd);
    else
      post(error_response(500, "no response", keep_alive_), Piece::Complete);
  }

  void send(HttpResponse r) override {
    std::lock_guard<std::mutex> lk(mu_);
    if (ended_ || streaming_) return;
    ended_ = true;
    post(serialize(r, keep_alive_), Piece::Complete);
  }
  void begin_stream(int status, std::string content_type, HttpHeaders headers) override {
    std::lock_guard<std::mutex> lk(mu_);
    if (ended_ || streaming_) return;
    streaming_ = true;
    headers.emplace_back("Cache-Control", "no-cache");
    // HTTP/1.0 has no chunked coding: the body runs until the connection closes.
    post(response_head(status, content_type, headers, std::nullopt, !http10_,
                       keep_alive_ && !http10_),
         Piece::StreamHead);
  }
  void write(std::string chunk) override {
    if (chunk.empty()) return;
    std::lock_guard<std::mutex> lk(mu_);
    if (!streaming_ || ended_) return;
    if (http10_)
      post(std::move(chunk), Piece::StreamData);
    else
      post(fmt::format("{:x}\r\n", chunk.size()) + chunk + "\r\n", Piece::StreamData);
  }
  void end_stream() override {
    std::lock_guard<std::mutex> lk(mu_);
    if (!streaming_ || ended_) return;
    ended_ = true;
    post(stream_end(), Piece::StreamEnd);
  }
  void on_close(std::function<void()> callback) override {
    net::post(conn_->executor(), [c = conn_, ex = exchange_, cb = std::move(callback)]() mutable {
      c->register_close(ex, std::move(cb));
    });
  }

 private:
  std::string stream_end() const { return http10_ ? std::string() : std::string("0\r\n\r\n"); }

  // mu_ held: posts keep the order of calls.
  void post(std::string bytes, Piece piece) { conn_->post_enqueue(exchange_, std::move(bytes), piece); }

  std::shared_ptr<Connection> conn_;
  uint64_t exchange_;
  bool keep_alive_;
  bool http10_;
  std::mutex mu_;
  bool ended_ = false;
  bool streaming_ = false;
};

}  // namespace

std::shared_ptr<ResponseSink> Connection::make_sink() {
  return std::make_shared<Sink>(shared_from_this(), exchange_, keep_alive_, http10_);
}

void HttpServer::Impl::do_accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (!acceptor.is_open()) return;
    if (ec) return accept_failed(ec);
    if (connections.load() >= connection_cap) {
      // Told why, in the few bytes a fresh socket's send buffer always takes.
      beast::error_code ignored;
      socket.non_blocking(true, ignored);
      const std::string busy = error_response(
          503,
          fmt::format("the server holds {} connections, its limit; retry later", connection_cap),
          false, {{"Retry-After", "1"}});
      socket.write_some(net::buffer(busy), ignored);
      // The request already here is read first: closing over unread bytes
      // would reset the connection, and the client might lose the answer.
      char discard[4096];
      for (int i = 0; i < 16 && !ignored; ++i) socket.read_some(net::buffer(discard), ignored);
      socket.shutdown(tcp::socket::shutdown_both, ignored);
      socket.close(ignored);
    } else {
      ++connections;
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      if (cfg.socket_send_buffer > 0)
        socket.set_option(net::socket_base::send_buffer_size(cfg.socket_send_buffer), ignored);
      std::make_shared<Connection>(std::move(socket), *this)->start();
    }
    do_accept();
  });
}

void HttpServer::Impl::accept_failed(const beast::error_code& ec) {
  ++accept_failures;
  const auto now = std::chrono::steady_clock::now();
  if (now - accept_warned >= std::chrono::seconds(5)) {
    spdlog::warn("http: accept failed {} time(s) since the last warning: {} ({} connections open)",
                 accept_failures, ec.message(), connections.load());
    accept_warned = now;
    accept_failures = 0;
  }
  // Out of descriptors or memory: wait for connections to end. Anything else
  // (a connection reset before it was accepted) concerns one connection.
  const bool exhausted = ec == net::error::no_descriptors || ec == net::error::no_buffer_space ||
                         ec == net::error::no_memory || ec.value() == ENFILE;
  accept_retry.expires_after(std::chrono::milliseconds(exhausted ? 50 : 1));
  accept_retry.async_wait([this](beast::error_code wait_ec) {
    if (!wait_ec && acceptor.is_open()) do_accept();
  });
}

void HttpServer::Impl::begin_shutdown() {
  if (stopping.exchange(true)) return;
  net::dispatch(acceptor.get_executor(), [this] {
    beast::error_code ignored;
    acceptor.close(ignored);
    accept_retry.cancel();
  });
  beast::error_code ignored;
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
    // The last bytes out, those still on their way to a connection's queue
    // too (bounded: a client that does not read is dropped by the write
    // timeout anyway).
    const auto flushed = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while ((queued_bytes.load() > 0 || posted.load() > 0) &&
           std::chrono::steady_clock::now() < flushed)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
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
  // Descriptors besides the connections': model files, logs, the engine's and
  // the metrics' own.
  constexpr size_t kOtherFiles = 256;
  const size_t want = impl_->cfg.max_connections + kOtherFiles;
  const size_t limit = raise_open_file_limit(want);
  impl_->connection_cap = std::min(impl_->cfg.max_connections,
                                   limit > 2 * kOtherFiles ? limit - kOtherFiles : limit / 2);
  if (impl_->connection_cap < impl_->cfg.max_connections)
    spdlog::warn(
        "http: the open-file limit ({}; hard limit reached) allows {} connections at once, not {}; "
        "more are answered 503 (raise it with `ulimit -n {}`)",
        limit, impl_->connection_cap, impl_->cfg.max_connections, want);
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
  // Handlers still running on the pool (a request read just before the drain
  // ended) finish before run() returns, so the application may then tear
  // down what they use.
  s.workers.join();
}

void HttpServer::stop() {
  net::post(impl_->ioc, [this] { impl_->begin_shutdown(); });
}

}  // namespace loom::server
