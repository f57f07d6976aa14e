// Beast client for the router's calls to replicas; see upstream_client.h.
// Everything below runs on the io_context's single thread, except abort(),
// start() and fetch(), which post onto it.
#include "router/upstream_client.h"

#include <algorithm>
#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <limits>
#include <map>
#include <vector>

namespace loom::router {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

const char* outcome_name(UpstreamOutcome outcome) {
  switch (outcome) {
    case UpstreamOutcome::Ok:
      return "ok";
    case UpstreamOutcome::ConnectFailed:
      return "connect_failed";
    case UpstreamOutcome::NoResponse:
      return "no_response";
    case UpstreamOutcome::Broken:
      return "broken";
    case UpstreamOutcome::Aborted:
      return "aborted";
  }
  return "unknown";
}

namespace {

// Per-connection headers (RFC 9110 7.6.1) and those the router sets itself.
bool forwardable_response_header(beast::string_view name) {
  static constexpr std::array<std::string_view, 9> kDrop = {
      "connection", "keep-alive",       "transfer-encoding", "te",    "trailer",
      "upgrade",    "proxy-connection", "content-length",    "server"};
  return std::none_of(kDrop.begin(), kDrop.end(), [&](std::string_view d) {
    return beast::iequals(beast::string_view(d.data(), d.size()), name);
  });
}

}  // namespace

struct UpstreamClient::Impl {
  struct Idle {
    std::unique_ptr<beast::tcp_stream> stream;
    Clock::time_point since;
  };
  net::io_context& io;
  UpstreamTimeouts timeouts;
  std::map<std::string, std::vector<Idle>> idle;  // by "host:port"

  Impl(net::io_context& i, UpstreamTimeouts t) : io(i), timeouts(t) {}

  std::unique_ptr<beast::tcp_stream> take_idle(const std::string& key) {
    auto it = idle.find(key);
    if (it == idle.end()) return nullptr;
    auto& list = it->second;
    const auto now = Clock::now();
    while (!list.empty()) {
      Idle entry = std::move(list.back());
      list.pop_back();
      if (now - entry.since < timeouts.idle_keep) return std::move(entry.stream);
    }
    return nullptr;
  }
  void give_back(const std::string& key, std::unique_ptr<beast::tcp_stream> stream) {
    auto& list = idle[key];
    if (list.size() >= timeouts.max_idle_per_replica) list.erase(list.begin());  // oldest
    list.push_back({std::move(stream), Clock::now()});
  }
};

namespace {

class Exchange : public UpstreamCall, public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(std::shared_ptr<UpstreamClient::Impl> client, std::string host, std::string port,
           UpstreamRequest request, UpstreamHandlers handlers)
      : client_(std::move(client)),
        host_(std::move(host)),
        port_(std::move(port)),
        key_(host_ + ":" + port_),
        resolver_(client_->io),
        h_(std::move(handlers)) {
    timeout_ = request.timeout.count() > 0 ? request.timeout : client_->timeouts.read;
    req_ = {http::string_to_verb(request.method), request.target, 11};
    if (req_.method() == http::verb::unknown) req_.method_string(request.method);
    for (const auto& [name, value] : request.headers) req_.insert(name, value);
    req_.set(http::field::host, key_);
    req_.keep_alive(true);
    if (!request.body.empty() || req_.method() == http::verb::post) {
      req_.body() = std::move(request.body);
      req_.prepare_payload();
    }
  }

  void start() {
    net::post(client_->io, [self = shared_from_this()] {
      if (self->done_) return;
      self->stream_ = self->client_->take_idle(self->key_);
      self->reused_ = self->stream_ != nullptr;
      if (self->reused_)
        self->write();
      else
        self->connect();
    });
  }

  void abort() override {
    net::post(client_->io,
              [self = shared_from_this()] { self->finish(UpstreamOutcome::Aborted, "aborted"); });
  }

 private:
  void connect() {
    resolver_.async_resolve(
        host_, port_,
        [self = shared_from_this()](beast::error_code ec, tcp::resolver::results_type results) {
          if (self->done_) return;
          if (ec) return self->finish(UpstreamOutcome::ConnectFailed, "resolve: " + ec.message());
          self->stream_ = std::make_unique<beast::tcp_stream>(self->client_->io);
          self->stream_->expires_after(self->client_->timeouts.connect);
          self->stream_->async_connect(results, [self](beast::error_code ec, const tcp::endpoint&) {
            if (self->done_) return;
            if (ec) return self->finish(UpstreamOutcome::ConnectFailed, "connect: " + ec.message());
            beast::error_code ignored;
            self->stream_->socket().set_option(tcp::no_delay(true), ignored);
            self->write();
          });
        });
  }

  void write() {
    parser_.emplace();
    parser_->header_limit(64 << 10);
    parser_->body_limit(std::numeric_limits<uint64_t>::max());
    buffer_.clear();
    stream_->expires_after(timeout_);
    http::async_write(*stream_, req_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (self->done_) return;
      if (ec) return self->failed_before_head("write: " + ec.message());
      self->read_head();
    });
  }

  void read_head() {
    stream_->expires_after(timeout_);
    http::async_read_header(*stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (self->done_) return;
                              if (ec) return self->failed_before_head("read: " + ec.message());
                              self->on_head();
                            });
  }

  // A pooled connection that the replica closed while idle fails here too:
  // that one gets a fresh connection, once.
  void failed_before_head(const std::string& what) {
    if (reused_) {
      close();
      reused_ = false;
      client_->idle.erase(key_);  // its siblings are likely stale as well
      connect();
      return;
    }
    finish(UpstreamOutcome::NoResponse, what);
  }

  void on_head() {
    const auto& msg = parser_->get();
    server::HttpHeaders headers;
    for (const auto& f : msg)
      if (forwardable_response_header(f.name_string()))
        headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    std::optional<uint64_t> length;
    if (auto n = parser_->content_length(); n && !parser_->chunked()) length = *n;
    if (h_.on_head && !h_.on_head(int(msg.result_int()), std::move(headers), length))
      return finish(UpstreamOutcome::Aborted, "response declined");
    read_body();
  }

  void read_body() {
    if (parser_->is_done()) return complete();
    parser_->get().body().data = chunk_;
    parser_->get().body().size = sizeof chunk_;
    stream_->expires_after(timeout_);
    http::async_read_some(*stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) {
                            if (self->done_) return;
                            if (ec == http::error::need_buffer) ec = {};
                            const size_t n = sizeof self->chunk_ - self->parser_->get().body().size;
                            if (n > 0 && self->h_.on_body)
                              self->h_.on_body(std::string_view(self->chunk_, n));
                            if (self->done_) return;  // on_body may abort
                            if (ec)
                              return self->finish(UpstreamOutcome::Broken, "read: " + ec.message());
                            self->read_body();
                          });
  }

  void complete() {
    if (parser_->keep_alive() && buffer_.size() == 0) {
      stream_->expires_never();
      client_->give_back(key_, std::move(stream_));
    }
    finish(UpstreamOutcome::Ok, "");
  }

  void close() {
    if (!stream_) return;
    beast::error_code ignored;
    stream_->socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_->socket().close(ignored);
  }

  void finish(UpstreamOutcome outcome, const std::string& error) {
    if (done_) return;
    done_ = true;
    resolver_.cancel();
    close();
    auto handlers = std::move(h_);  // drops what the handlers hold once they have run
    h_ = {};
    if (handlers.on_done) handlers.on_done(outcome, error);
  }

  std::shared_ptr<UpstreamClient::Impl> client_;
  std::string host_, port_, key_;
  tcp::resolver resolver_;
  UpstreamHandlers h_;
  http::request<http::string_body> req_;
  std::chrono::milliseconds timeout_{0};
  std::unique_ptr<beast::tcp_stream> stream_;
  bool reused_ = false;
  bool done_ = false;
  beast::flat_buffer buffer_;
  std::optional<http::response_parser<http::buffer_body>> parser_;
  char chunk_[16384];
};

}  // namespace

UpstreamClient::UpstreamClient(net::io_context& io, UpstreamTimeouts timeouts)
    : impl_(std::make_shared<Impl>(io, timeouts)) {}

UpstreamClient::~UpstreamClient() = default;

std::shared_ptr<UpstreamCall> UpstreamClient::start(const std::string& host,
                                                    const std::string& port,
                                                    UpstreamRequest request,
                                                    UpstreamHandlers handlers) {
  auto ex = std::make_shared<Exchange>(impl_, host, port, std::move(request), std::move(handlers));
  ex->start();
  return ex;
}

void UpstreamClient::fetch(const std::string& host, const std::string& port,
                           const std::string& target, std::chrono::milliseconds timeout,
                           std::function<void(int, std::string, std::string)> done) {
  constexpr size_t kMaxBody = size_t(8) << 20;
  struct State {
    int status = 0;
    std::string body;
    bool too_large = false;
  };
  auto st = std::make_shared<State>();
  UpstreamRequest req;
  req.target = target;
  req.timeout = timeout;
  req.headers = {{"Accept", "*/*"}, {"User-Agent", "loom-router"}};
  UpstreamHandlers h;
  h.on_head = [st](int status, server::HttpHeaders, std::optional<uint64_t>) {
    st->status = status;
    return true;
  };
  h.on_body = [st](std::string_view piece) {
    if (st->body.size() + piece.size() > kMaxBody)
      st->too_large = true;
    else
      st->body.append(piece);
  };
  h.on_done = [st, done = std::move(done)](UpstreamOutcome outcome, const std::string& error) {
    if (outcome != UpstreamOutcome::Ok) return done(0, "", error);
    if (st->too_large) return done(0, "", "response body over 8 MiB");
    done(st->status, std::move(st->body), "");
  };
  start(host, port, std::move(req), std::move(h));
}

}  // namespace loom::router
