// HttpServer: async HTTP/1.1 (keep-alive, chunked streaming) on Boost.Beast
// with a fixed number of I/O threads; handlers run on a small worker pool so
// parsing and tokenisation never stall the I/O threads. Each connection has
// its own bounded write queue: a slow reader only ever stalls itself (and is
// dropped when its queue overflows). Beast stays inside http_server.cpp.
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
  size_t max_queued_bytes = size_t(8) << 20;  // per connection, unsent response bytes
  size_t max_connections = 10000;
  std::chrono::seconds idle_timeout{60};      // keep-alive wait / slow request headers
  std::chrono::seconds shutdown_timeout{30};  // SIGTERM: drain in-flight requests this long
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
  // the rest, then returns.
  void run(bool handle_signals = true);
  void stop();  // any thread: drain as on SIGTERM, then return from run()

  struct Impl;  // opaque (Beast lives in http_server.cpp)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::server
