// loom serve: the OpenAI-compatible HTTP server (src/server) over one model's
// engine. Binds its port first (a port in use fails at once), then loads the
// model, then serves until SIGTERM/SIGINT, drains in-flight requests up to
// --shutdown-timeout, and exits 0. Flags take vLLM's spellings where vLLM
// has one (positional model, --served-model-name, --max-model-len, ...).
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>

#include "build_info.h"
#include "cli.h"
#include "cli_app.h"
#include "core/error.h"
#include "core/logging.h"
#include "runtime.h"
#include "server/cors.h"
#include "server/http_server.h"
#include "server/openai_server.h"
#include "tokenizer/tokenizer.h"

namespace loom::cli {

namespace {

// The model id in the API when --served-model-name is not given: the file
// name without .gguf, or the directory's name.
std::string default_model_name(const std::string& path) {
  std::filesystem::path p(path);
  if (!p.has_filename()) p = p.parent_path();
  return p.extension() == ".gguf" ? p.stem().string() : p.filename().string();
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  CLI::App app{
      "Serve the OpenAI-compatible HTTP API (/v1/completions, /v1/chat/completions, "
      "/v1/messages, /v1/responses, ...)"};
  show_defaults(app);
  RuntimeOptions rt_opts;
  add_runtime_options(app, rt_opts);
  server::HttpServerConfig http;
  server::OpenAiServerConfig api;
  server::CorsConfig cors;
  std::string api_key_file, deny_rules, log_level = "info", log_format = "text";
  std::vector<std::string> api_keys, served_names;
  int shutdown_timeout = 30, watchdog = 30, write_timeout = 30;
  bool quiet = false, disable_log_requests = false;
  app.add_option("--host", http.host, "address to bind");
  app.add_option("--port", http.port, "port to bind (0: any free port)");
  app.add_option("--served-model-name", served_names,
                 "model ids in the API, the first reported by default (default: the file name)")
      ->expected(1, 64);
  app.add_option("--seed", rt_opts.seed,
                 "seed of the engine-wide generator (same as --engine-seed)");
  app.add_option("--api-key", api_keys, "require this API key (tenant 'default'); repeatable");
  app.add_option("--api-key-file", api_key_file,
                 "JSON {\"tenants\": [{\"name\", \"keys\": [...], \"max_concurrent\", "
                 "\"tokens_per_minute\", \"max_prompt_tokens\", \"weight\"}]}");
  app.add_option("--deny-rules", deny_rules, "JSON {\"deny\": [{\"name\", \"pattern\"}]} (RE2)");
  app.add_option("--allowed-origins", cors.allowed_origins,
                 "CORS: origins whose pages may call the API (\"*\": any); none: no CORS headers")
      ->delimiter(',');
  app.add_flag("--allow-credentials", cors.allow_credentials,
               "CORS: allow cookies / Authorization from those origins");
  app.add_flag("--metrics-public", api.metrics_public,
               "/metrics answers without an API key (for Prometheus scrapes)");
  app.add_option("--shutdown-timeout", shutdown_timeout, "seconds to drain requests on SIGTERM")
      ->check(CLI::Range(0, 3600));
  app.add_option("--watchdog", watchdog,
                 "seconds without an engine step (while busy) before /ready fails")
      ->check(CLI::Range(1, 3600));
  app.add_option("--write-timeout", write_timeout,
                 "seconds a response write may make no progress before the connection is dropped")
      ->check(CLI::Range(1, 3600));
  app.add_option("--socket-send-buffer", http.socket_send_buffer,
                 "SO_SNDBUF bytes per connection (0: the kernel's default)")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--io-threads", http.io_threads, "HTTP I/O threads")->check(CLI::Range(1, 64));
  app.add_option("--max-body-bytes", api.limits.max_body_bytes, "largest request body")
      ->check(CLI::Range(size_t(1024), size_t(1) << 30));
  app.add_option("--max-n", api.limits.max_n, "largest n")->check(CLI::Range(1, 128));
  app.add_option("--max-tokens-limit", api.limits.max_tokens, "largest max_tokens")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--max-connections", http.max_connections, "open connections at most")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  app.add_option("--log-level", log_level, "trace, debug, info, warning, error, critical or off")
      ->check(
          CLI::IsMember({"trace", "debug", "info", "warning", "warn", "error", "critical", "off"}));
  app.add_option("--log-format", log_format, "text, or json (one object per line)")
      ->check(CLI::IsMember({"text", "json"}));
  app.add_flag("--disable-log-requests", disable_log_requests, "no access-log line per request");
  app.add_flag("--profile-steps", rt_opts.profile_steps,
               "profile the engine's steps (host phases, device spans and gaps by kind of step), "
               "served as JSON at GET /debug/step_profile (loom bench serve --profile reads it)");
  app.add_flag("--quiet", quiet, "warnings and errors only (--log-level warning)");
  int max_grammar_compile_ms = 2000, grammar_threads = 2;
  std::string tool_call_parser, reasoning_parser;
  app.add_option("--max-grammar-compile-ms", max_grammar_compile_ms,
                 "longest a structured-output grammar may compile before the request gets a 400")
      ->check(CLI::Range(1, 600000));
  app.add_option("--grammar-compile-threads", grammar_threads, "threads compiling grammars")
      ->check(CLI::Range(1, 64));
  app.add_option(
         "--tool-call-parser", tool_call_parser,
         "how the model writes tool calls: hermes, llama3_json, mistral, pythonic, gemma_tool_code "
         "(default: read from the chat template)")
      ->check(CLI::IsMember(server::tool_call_format_names()));
  app.add_option("--reasoning-parser", reasoning_parser,
                 "split <think> sections into reasoning_content: qwen3, deepseek_r1")
      ->check(CLI::IsMember(server::reasoning_format_names()));
  // Hidden (no group): the fault-injection tests make the backend fail or
  // stall steps on command (backend/fault_injection_backend.h).
  app.add_option("--test-fault-file", rt_opts.test_fault_file)->group("");
  LOOM_PARSE(app, argc, argv);
  return guarded("serve", [&] {
    set_log_format(log_format);
    if (log_level == "warning") log_level = "warn";
    set_log_level(quiet ? "warn" : log_level);
    api.log_requests = !disable_log_requests;
    api.build_info = build_info_json();
    server::TenantRegistry tenants;
    if (!api_keys.empty()) tenants.add_tenant(server::Tenant{"default", {}}, api_keys);
    if (!api_key_file.empty()) tenants.load_file(api_key_file);
    server::RequestFilter filter;
    if (!deny_rules.empty()) filter = server::RequestFilter::from_file(deny_rules);
    http.max_body_bytes = api.limits.max_body_bytes;
    http.shutdown_timeout = std::chrono::seconds(shutdown_timeout);
    http.write_timeout = std::chrono::seconds(write_timeout);
    http.run_inline = &server::OpenAiServer::runs_inline;

    // The port first: a port in use fails before minutes of model loading.
    // Connections wait in the listen backlog until run() accepts them.
    std::unique_ptr<server::OpenAiServer> api_server;
    auto drain = [&api_server] {
      return api_server ? api_server->drain_hooks() : server::DrainHooks{};
    };
    server::DrainHooks hooks;
    hooks.begin = [drain] {
      if (auto h = drain(); h.begin) h.begin();
    };
    hooks.in_flight = [drain] {
      auto h = drain();
      return h.in_flight ? h.in_flight() : size_t(0);
    };
    hooks.abort_all = [drain] {
      if (auto h = drain(); h.abort_all) h.abort_all();
    };
    server::HttpServer http_server(
        http,
        server::with_cors(
            cors,
            [&api_server](server::HttpRequest req, std::shared_ptr<server::ResponseSink> sink) {
              if (api_server)
                api_server->handle(std::move(req), std::move(sink));
              else
                sink->send({503, "application/json", "{\"status\": \"loading\"}", {}});
            }),
        std::move(hooks));
    http_server.listen();
    spdlog::info("loom serve: {}; bound to {}:{}, loading the model", build_info_line(), http.host,
                 http_server.port());

    auto rt = build_runtime(rt_opts);
    if (!rt->text.tokenizer)
      LOOM_THROW("{}: the model has no tokenizer; loom serve needs one", rt_opts.model);
    server::ModelContext model;
    model.name = served_names.empty() ? default_model_name(rt_opts.model) : served_names[0];
    if (served_names.size() > 1) model.aliases.assign(served_names.begin() + 1, served_names.end());
    model.tokenizer = rt->text.tokenizer.get();
    model.chat = rt->text.chat ? &*rt->text.chat : nullptr;
    model.vocab_size = int32_t(rt->model.config.vocab_size);
    model.pooling = rt->model.pooling.type;
    spdlog::info("loom serve: /v1/embeddings pooling {} ({}), normalised", pooling_type_name(model.pooling),
                 rt->model.pooling.source);
    model.tool_format = !tool_call_parser.empty()
                            ? *server::tool_call_format(tool_call_parser)
                            : server::detect_tool_call_format(model.chat ? model.chat->source() : "");
    if (!reasoning_parser.empty()) model.reasoning = server::reasoning_format(reasoning_parser);
    structured::CompilerOptions grammar_opts;
    grammar_opts.max_compile_time = std::chrono::milliseconds(max_grammar_compile_ms);
    grammar_opts.threads = grammar_threads;
    api.grammars = std::make_shared<structured::GrammarCompiler>(
        *model.tokenizer, std::max(model.vocab_size, model.tokenizer->vocab_size()), grammar_opts);
    spdlog::info("loom serve: structured output {}, tool calls as {}{}",
                 structured::GrammarCompiler::available() ? "on" : "off (no xgrammar in this build)",
                 model.tool_format.name,
                 model.reasoning ? ", reasoning as " + model.reasoning->name : "");
    int64_t max_len = rt->model.config.max_position > 0 ? rt->model.config.max_position : 1 << 30;
    if (rt_opts.max_model_len > 0) max_len = std::min<int64_t>(max_len, rt_opts.max_model_len);
    max_len =
        std::min<int64_t>(max_len, int64_t(rt->engine->num_kv_blocks()) * rt->engine->block_size());
    model.max_model_len = int32_t(max_len);
    api.limits.max_tokens = std::min(api.limits.max_tokens, model.max_model_len);
    api.watchdog = std::chrono::seconds(watchdog);
    api.gpu_metrics = server::open_nvml();  // null without libnvidia-ml or a GPU
    spdlog::info("loom serve: GPU metrics {}", api.gpu_metrics ? "from NVML" : "off (no NVML)");

    rt->engine->start();
    api_server = std::make_unique<server::OpenAiServer>(api, *rt->engine, model, std::move(tenants),
                                                        std::move(filter));
    spdlog::info("loom serve: model '{}' ({} tokens of context, chat template: {}) on http://{}:{}",
                 model.name, model.max_model_len, model.chat ? "yes" : "no", http.host,
                 http_server.port());
    // Always printed (whatever --log-level): scripts wait for this line.
    const std::string listening =
        fmt::format("loom serve: listening on http://{}:{}", http.host, http_server.port());
    if (log_format == "json")
      std::fprintf(stderr, "%s\n",
                   nlohmann::json{{"level", "info"}, {"message", listening}}.dump().c_str());
    else
      std::fprintf(stderr, "%s\n", listening.c_str());
    http_server.run();
    rt->engine->stop();
    api_server.reset();  // before the engine it uses
    spdlog::info("loom serve: stopped");
    return 0;
  });
}

}  // namespace loom::cli
