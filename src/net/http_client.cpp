// The HTTP/1.1 clients of net/http_client.h (Boost.Beast).
#include "net/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <limits>
#include <optional>
#include <vector>

#include "core/error.h"

namespace loom::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

http::request<http::string_body> make_request(const Url& url, const std::string& method,
                                              const std::string& path, std::string body) {
  http::request<http::string_body> req{http::string_to_verb(method), url.base_path + path, 11};
  req.set(http::field::host, url.host + ":" + url.port);
  req.set(http::field::user_agent, "loom");
  req.keep_alive(true);
  if (req.method() != http::verb::get) {
    req.set(http::field::content_type, "application/json");
    req.body() = std::move(body);
    req.prepare_payload();
  }
  return req;
}

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

}  // namespace

HttpResult http_request(const Url& url, const std::string& method, const std::string& path,
                        const std::string& body, double timeout_s,
                        const std::vector<std::pair<std::string, std::string>>& headers) {
  HttpResult r;
  try {
    asio::io_context io;
    tcp::resolver resolver(io);
    beast::tcp_stream stream(io);
    stream.expires_after(seconds(timeout_s));
    stream.connect(resolver.resolve(url.host, url.port));
    auto req = make_request(url, method, path, body);
    for (const auto& [name, value] : headers) req.set(name, value);
    req.keep_alive(false);
    stream.expires_after(seconds(timeout_s));
    http::write(stream, req);
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64ull << 20);
    stream.expires_after(seconds(timeout_s));
    http::read(stream, buf, parser);
    r.status = static_cast<int>(parser.get().result_int());
    r.body = std::move(parser.get().body());
    beast::error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  } catch (const std::exception& e) {
    r.status = 0;
    r.error = e.what();
  }
  return r;
}

// One request in flight. Owns its connection until the response ends; the
// connection then goes back to the pool when the server keeps it alive.
struct StreamingHttpClient::Impl : std::enable_shared_from_this<StreamingHttpClient::Impl> {
  asio::io_context& io;
  Url url;
  double timeout_s;
  tcp::resolver::results_type endpoints;
  std::vector<std::unique_ptr<beast::tcp_stream>> idle;

  Impl(asio::io_context& io_, Url u, double t) : io(io_), url(std::move(u)), timeout_s(t) {}

  struct Exchange : std::enable_shared_from_this<Exchange> {
    std::shared_ptr<Impl> client;
    std::unique_ptr<beast::tcp_stream> stream;
    bool reused = false;
    bool got_header = false;
    http::request<http::string_body> req;
    beast::flat_buffer buffer;
    std::optional<http::response_parser<http::buffer_body>> parser;
    char chunk[16384];
    Handlers h;
    bool ended = false;      // on_done ran
    bool cancelled = false;  // cancel() closed the connection

    void start() {
      auto& pool = client->idle;
      if (!pool.empty()) {
        stream = std::move(pool.back());
        pool.pop_back();
        reused = true;
        write();
        return;
      }
      reused = false;
      start_fresh();
    }

    void write() {
      parser.emplace();
      parser->body_limit(std::numeric_limits<std::uint64_t>::max());
      buffer.clear();
      stream->expires_after(seconds(client->timeout_s));
      http::async_write(*stream, req, [self = shared_from_this()](beast::error_code ec, size_t) {
        if (self->ended) return;
        if (ec) return self->retry_or_fail("write: " + ec.message());
        self->read_header();
      });
    }

    void read_header() {
      stream->expires_after(seconds(client->timeout_s));
      http::async_read_header(
          *stream, buffer, *parser, [self = shared_from_this()](beast::error_code ec, size_t) {
            if (self->ended) return;
            if (ec) return self->retry_or_fail("read: " + ec.message());
            self->got_header = true;
            if (self->h.on_status)
              self->h.on_status(static_cast<int>(self->parser->get().result_int()));
            self->read_body();
          });
    }

    void read_body() {
      if (parser->is_done()) return finish();
      parser->get().body().data = chunk;
      parser->get().body().size = sizeof chunk;
      stream->expires_after(seconds(client->timeout_s));
      http::async_read_some(*stream, buffer, *parser,
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (ec == http::error::need_buffer) ec = {};
                              const size_t n = sizeof self->chunk - self->parser->get().body().size;
                              if (self->ended) return;
                              if (n > 0 && self->h.on_body)
                                self->h.on_body(std::string_view(self->chunk, n));
                              if (ec) return self->fail("read: " + ec.message());
                              self->read_body();
                            });
    }

    void finish() {
      if (ended) return;
      const bool keep = parser->keep_alive();
      if (keep && buffer.size() == 0 && !cancelled)
        client->idle.push_back(std::move(stream));
      else
        close();
      done("");
    }

    void done(const std::string& error) {
      if (ended) return;
      ended = true;
      if (h.on_done) h.on_done(cancelled ? "cancelled" : error);
    }

    void cancel() {
      if (ended || cancelled) return;
      cancelled = true;
      close();
      done("");
    }

    // A pooled connection the server closed meanwhile fails before any
    // response byte: try once more on a fresh one.
    void retry_or_fail(const std::string& what) {
      if (reused && !got_header && !cancelled) {
        close();
        reused = false;
        stream.reset();
        client->idle.clear();  // the others are likely stale too
        start_fresh();
        return;
      }
      fail(what);
    }

    void start_fresh() {
      stream = std::make_unique<beast::tcp_stream>(client->io);
      stream->expires_after(seconds(client->timeout_s));
      stream->async_connect(client->endpoints, [self = shared_from_this()](beast::error_code ec,
                                                                           const tcp::endpoint&) {
        if (self->ended) return;
        if (ec) return self->fail("connect: " + ec.message());
        self->write();
      });
    }

    void close() {
      if (!stream) return;
      beast::error_code ec;
      stream->socket().shutdown(tcp::socket::shutdown_both, ec);
      stream->socket().close(ec);
    }

    void fail(const std::string& what) {
      close();
      done(what);
    }
  };
};

StreamingHttpClient::StreamingHttpClient(asio::io_context& io, const Url& url, double timeout_s)
    : impl_(std::make_shared<Impl>(io, url, timeout_s)) {
  try {
    tcp::resolver resolver(io);
    impl_->endpoints = resolver.resolve(url.host, url.port);
  } catch (const std::exception& e) {
    LOOM_THROW("cannot resolve {}:{}: {}", url.host, url.port, e.what());
  }
}

StreamingHttpClient::~StreamingHttpClient() = default;

void StreamingHttpClient::post(const std::string& path, std::string body, Handlers handlers) {
  send("POST", path, std::move(body), {}, std::move(handlers));
}

std::function<void()> StreamingHttpClient::send(const std::string& method, const std::string& path,
                                                std::string body, const Headers& headers,
                                                Handlers handlers) {
  auto ex = std::make_shared<Impl::Exchange>();
  ex->client = impl_;
  ex->req = make_request(impl_->url, method, path, std::move(body));
  for (const auto& [name, value] : headers) ex->req.set(name, value);
  ex->h = std::move(handlers);
  ex->start();
  return [weak = std::weak_ptr<Impl::Exchange>(ex)] {
    if (auto e = weak.lock()) e->cancel();
  };
}

}  // namespace loom::net
