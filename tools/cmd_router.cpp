// loom router: the data-parallel front of several `loom serve` replicas
// (src/router). Runs until SIGTERM/SIGINT, lets open requests finish up to
// --shutdown-timeout, then exits 0.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli.h"
#include "cli_app.h"
#include "core/open_files.h"
#include "router/router.h"
#include "server/http_server.h"

namespace loom::cli {

namespace {
std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(int64_t(seconds * 1000));
}
}  // namespace

int cmd_router(int argc, char** argv) {
  CLI::App app{
      "Route OpenAI requests over several loom serve replicas: same prefix, same "
      "replica (its prefix cache), unless that one is overloaded"};
  show_defaults(app);
  router::RouterConfig cfg;
  server::HttpServerConfig http;
  double health_interval = 2, health_timeout = 2, upstream_timeout = 600, connect_timeout = 5;
  int shutdown_timeout = 30;
  bool quiet = false;
  app.add_option("--backends", cfg.backends,
                 "replica base URLs, comma-separated (http://host:port)")
      ->delimiter(',');
  app.add_option("--backends-dns", cfg.backends_dns,
                 "NAME:PORT: every address NAME resolves to is a replica (a headless Service), "
                 "resolved again every health interval");
  app.add_option("--host", http.host, "address to bind (default 127.0.0.1)");
  app.add_option("--port", http.port, "port to bind (default 8000; 0: any free port)");
  app.add_option("--prefix-tokens", cfg.prefix_chars,
                 "routing key: the first N characters of the prompt / rendered messages, or the "
                 "first N token ids (default 256)")
      ->check(CLI::Range(size_t(1), size_t(1) << 20));
  app.add_option("--health-interval", health_interval,
                 "seconds between health checks and /metrics scrapes")
      ->check(CLI::Range(0.05, 3600.0));
  app.add_option("--health-timeout", health_timeout, "seconds a health check may take")
      ->check(CLI::Range(0.05, 600.0));
  app.add_option("--max-retries", cfg.max_retries,
                 "other replicas tried when one fails before answering (default 1)")
      ->check(CLI::Range(0, 16));
  app.add_option("--spill-margin", cfg.policy.spill_margin,
                 "leave the prefix's replica when it has this many more requests than the least "
                 "loaded one ...")
      ->check(CLI::Range(0.0, 1e9));
  app.add_option("--spill-ratio", cfg.policy.spill_ratio, "... and this many times as many")
      ->check(CLI::Range(1.0, 1e9));
  app.add_option("--kv-spill", cfg.policy.kv_spill,
                 "or when its KV cache usage is at least this while another's is lower")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--upstream-timeout", upstream_timeout,
                 "seconds to wait for each read from a replica")
      ->check(CLI::Range(0.1, 86400.0));
  app.add_option("--connect-timeout", connect_timeout, "seconds to connect to a replica")
      ->check(CLI::Range(0.05, 600.0));
  app.add_option("--max-body-bytes", http.max_body_bytes, "largest request body")
      ->check(CLI::Range(size_t(1024), size_t(1) << 30));
  app.add_option("--max-connections", http.max_connections, "open client connections at most")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  app.add_option("--io-threads", http.io_threads, "HTTP I/O threads (client side)")
      ->check(CLI::Range(1, 64));
  app.add_option("--shutdown-timeout", shutdown_timeout,
                 "seconds to let open requests finish on SIGTERM")
      ->check(CLI::Range(0, 3600));
  app.add_flag("--quiet", quiet, "no access log");
  LOOM_PARSE(app, argc, argv);
  return guarded("router", [&] {
    spdlog::set_level(quiet ? spdlog::level::warn : spdlog::level::info);
    cfg.health_interval = millis(health_interval);
    cfg.health_timeout = millis(health_timeout);
    cfg.upstream.read = millis(upstream_timeout);
    cfg.upstream.connect = millis(connect_timeout);
    http.shutdown_timeout = std::chrono::seconds(shutdown_timeout);
    // Each proxied request holds an upstream connection beside the client's.
    raise_open_file_limit(2 * http.max_connections + 256);
    router::Router router(cfg);
    server::HttpServer http_server(
        http,
        [&router](server::HttpRequest req, std::shared_ptr<server::ResponseSink> sink) {
          router.handle(std::move(req), std::move(sink));
        },
        router.drain_hooks());
    http_server.listen();
    spdlog::info("loom router: {} replicas{}, prefix key {} characters", cfg.backends.size(),
                 cfg.backends_dns.empty() ? "" : " + DNS " + cfg.backends_dns, cfg.prefix_chars);
    std::fprintf(stderr, "loom router: listening on http://%s:%u\n", http.host.c_str(),
                 unsigned(http_server.port()));
    http_server.run();
    spdlog::info("loom router: stopped");
    return 0;
  });
}

}  // namespace loom::cli
