// HttpServer: async HTTP/1.1 (keep-alive, chunked streaming; HTTP/1.0
// streams until close) on Boost.Beast with a fixed number of I/O threads;
// handlers run on a small worker pool so parsing and tokenisation never stall
// the I/O threads (only routes the application marks cheap run inline). Each
// connection writes its queue into the socket as the client drains it, under
// a write deadline; streamed bytes are bounded per connection and all queued
// bytes across connections, so a slow reader only ever stalls itself (and is
// dropped). Beast stays inside http_server.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "server/http_types.h"

namespace loom::server {

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;                 // 0: any free port (see HttpServer::port)
  int io_threads = 2;
  int worker_threads = 2;               // run handlers
  size_t max_body_bytes = size_t(4) << 20;
  size_t max_header_bytes = 16 << 10;
  // Unsent bytes of a streamed response, per connection: past it the reader
  // is too slow and the connection is dropped. A complete response body is
  // not held to it (it exists already; it is written as the client reads).
  size_t max_queued_bytes = size_t(8) << 20;
  // Unsent bytes over all connections: past it a streamed response is
  // dropped and a complete response is replaced by a 503.
  size_t max_total_queued_bytes = size_t(1) << 30;
  size_t max_connections = 10000;
  // SO_SNDBUF of every accepted connection; 0: the kernel's default (which
  // grows to megabytes). Smaller buffers find a reader that stopped sooner.
  int socket_send_buffer = 0;
  std::chrono::seconds idle_timeout{60};      // keep-alive wait / slow request headers
  std::chrono::seconds write_timeout{30};     // a write making no progress this long: dropped
  std::chrono::seconds shutdown_timeout{30};  // SIGTERM: drain in-flight requests this long
  // Requests it accepts are handled on the I/O thread that read them, never
  // queued behind slow handlers on the worker pool (e.g. /health). They must
  // be cheap and must not block. Null: every request goes to the pool.
  std::function<bool(const HttpRequest&)> run_inline;
};

// What the server needs from the application for graceful shutdown.
struct DrainHooks {
  std::function<void()> begin;        // refuse new work from now on
  std::function<size_t()> in_flight;  // requests still running
  std::function<void()> abort_all;    // past the shutdown timeout
};

class HttpServer {
 public:
  HttpServer(HttpServerConfig config, RequestHandler handler, DrainHooks drain = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens (throws loom::Error when the address is unavailable).
  void listen();
  uint16_t port() const;
  // Serves until SIGTERM/SIGINT (when handle_signals) or stop(); on a signal:
  // stops accepting, drains in-flight requests up to shutdown_timeout, aborts
  // the rest, then returns once no handler runs any more (a handler on the
  // worker pool at that point is waited for).
  void run(bool handle_signals = true);
  void stop();  // any thread: drain as on SIGTERM, then return from run()

  struct Impl;  // opaque (Beast lives in http_server.cpp)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::server
