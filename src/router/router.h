// Router: the data-parallel front of several `loom serve` replicas
// (`loom router`). It answers /health, /ready and /metrics itself and
// forwards the OpenAI routes to one replica chosen by ReplicaSet: same
// prefix, same replica (prefix-cache affinity) unless that one is overloaded.
// Responses pass through as they arrive (SSE chunk by chunk). A replica that
// refuses connections or fails its health check leaves the rotation until a
// check passes again; a request whose replica fails before answering is
// retried on another; a client that goes away closes the upstream connection
// (the replica aborts the generation).
//
// Threads: handle() runs on the HTTP server's workers and only parses the
// body and picks a replica; one upstream thread (UpstreamClient) carries
// every proxied byte and runs the health/scrape loop; ResponseSink calls
// post to the client connections' strands.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "router/replica_set.h"
#include "router/upstream_client.h"
#include "server/http_server.h"
#include "server/http_types.h"
#include "server/metrics.h"

namespace loom::router {

struct RouterConfig {
  std::vector<std::string> backends;  // base URLs "http://host:port"
  // "name:port": every address `name` resolves to is a replica (a Kubernetes
  // headless Service); resolved again every health interval.
  std::string backends_dns;
  size_t prefix_chars = 256;  // routing key: this many bytes of prompt, or token ids
  std::chrono::milliseconds health_interval{2000};
  std::chrono::milliseconds health_timeout{2000};
  int max_retries = 1;  // other replicas tried when one fails before answering
  size_t max_buffered_response = size_t(16) << 20;  // larger Content-Length bodies are streamed
  RoutingConfig policy;
  UpstreamTimeouts upstream;
};

class Router {
 public:
  // Starts the upstream thread and the health loop (the first check at once).
  // Throws loom::Error for a bad backend URL or DNS name, or when neither is given.
  explicit Router(RouterConfig config);
  ~Router();  // stops the loop and the thread; aborts calls still open
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // The HttpServer handler (any thread).
  void handle(server::HttpRequest request, std::shared_ptr<server::ResponseSink> sink);
  // For HttpServer: SIGTERM refuses new requests, waits for open ones, aborts the rest.
  server::DrainHooks drain_hooks();

  // Runs one health round now and waits for it (tests, start-up).
  void check_health_now();
  std::vector<ReplicaView> replicas() const;
  const server::Metrics& metrics() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::router
