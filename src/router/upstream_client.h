// UpstreamClient: the router's HTTP/1.1 client towards the replicas (Beast;
// plain http). Many calls at once on one io_context run by exactly ONE thread
// (all client state and every handler live on it, so nothing here is locked
// but the abort hand-off); the body is handed over piece by piece as it
// arrives, so streams pass through without being buffered. Idle keep-alive
// connections are pooled per replica; a pooled connection the replica closed
// meanwhile is replaced by a fresh one transparently. Beast stays inside
// upstream_client.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "server/http_types.h"

namespace boost::asio {
class io_context;
}

namespace loom::router {

struct UpstreamRequest {
  std::string method = "GET";
  std::string target = "/";     // path and query
  server::HttpHeaders headers;  // sent as given (Host and Content-Length are set here)
  std::string body;
  std::chrono::milliseconds timeout{0};  // each read/write wait; 0: the client's default
};

enum class UpstreamOutcome {
  Ok,
  ConnectFailed,  // resolve or connect failed (refused, unreachable, timed out)
  NoResponse,     // connected, but the connection failed before the response head
  Broken,         // the connection failed in the middle of the body
  Aborted,        // abort(), or on_head declined the response
};
const char* outcome_name(UpstreamOutcome outcome);

struct UpstreamHandlers {
  // Once, when the response head is in (headers without hop-by-hop ones and
  // Content-Length / Transfer-Encoding; content_length when the replica sent
  // one). Return false to decline: the connection is closed, on_done says
  // Aborted.
  std::function<bool(int status, server::HttpHeaders headers,
                     std::optional<uint64_t> content_length)>
      on_head;
  std::function<void(std::string_view piece)> on_body;  // the de-chunked body, in order
  std::function<void(UpstreamOutcome outcome, const std::string& error)> on_done;  // once
};

// A call in progress. abort() may be called from any thread, any number of
// times: closes the connection (the replica sees the client go away).
class UpstreamCall {
 public:
  virtual ~UpstreamCall() = default;
  virtual void abort() = 0;
};

struct UpstreamTimeouts {
  std::chrono::milliseconds connect{5000};
  std::chrono::milliseconds read{600000};      // default for each wait on the replica
  std::chrono::milliseconds idle_keep{20000};  // drop pooled connections idle this long
  size_t max_idle_per_replica = 64;
};

class UpstreamClient {
 public:
  UpstreamClient(boost::asio::io_context& io, UpstreamTimeouts timeouts = {});
  ~UpstreamClient();
  UpstreamClient(const UpstreamClient&) = delete;
  UpstreamClient& operator=(const UpstreamClient&) = delete;

  // Any thread. Handlers run on the io_context's thread; the call keeps
  // itself alive until on_done has run.
  std::shared_ptr<UpstreamCall> start(const std::string& host, const std::string& port,
                                      UpstreamRequest request, UpstreamHandlers handlers);

  // A small GET whose whole body is wanted (health checks, /metrics).
  // done(status, body, error): status 0 with error when no response came.
  void fetch(const std::string& host, const std::string& port, const std::string& target,
             std::chrono::milliseconds timeout,
             std::function<void(int status, std::string body, std::string error)> done);

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace loom::router
