// The serving benchmark's driver: sends a workload (serve_workload.h) to an
// OpenAI-compatible server as streamed requests - Poisson arrivals at a rate,
// at most C in flight, or all at once - on one io_context thread, and records
// when every text chunk arrived (serve_stats.h). A second thread scrapes the
// server's /metrics (and /proc of a local server's pid) before, during and
// after the run.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "serve_stats.h"
#include "serve_workload.h"

namespace loom::bench {

struct ServeRunOptions {
  std::string base_url;  // http://host:port (the /v1/... paths are added)
  BodyOptions body;
  double request_rate = std::numeric_limits<double>::infinity();  // requests/s
  int64_t max_concurrency = 0;                                    // 0: no bound
  uint64_t seed = 0;                                              // arrivals
  double timeout_s = 600;                                         // each wait for the server
  double scrape_interval_s = 0.5;  // /metrics while running; 0: before and after only
  int64_t server_pid = 0;          // sample /proc/PID/status (local server) when > 0
  // Called on the driver's thread after each request ends (done of total);
  // must not block. Null: none.
  std::function<void(size_t done, size_t total)> on_progress;
  // Edits the body of each request (conversation index, body) before it is
  // sent, e.g. to add a response_format. Null: none.
  std::function<void(size_t conv, nlohmann::json& body)> customize;
};

struct ServeRun {
  std::vector<RequestRecord> records;  // in completion order
  double duration_s = 0;               // first send to last completion
  nlohmann::json server;               // ServerMetricsTracker::to_json()
};

// Runs every turn of every conversation. Throws loom::Error only when the
// server cannot be resolved; request failures are recorded.
ServeRun run_serve(const std::vector<ServeConversation>& convs, const ServeRunOptions& opt);

// Applies one SSE event of a streamed completion (or chat completion) to
// `rec` at time `now_s`: text chunks are timed and their text appended to
// *answer, the usage chunk sets the token counts, error objects the error.
// Returns true on "[DONE]".
bool apply_sse_event(std::string_view data, double now_s, ServeEndpoint endpoint,
                     RequestRecord& rec, std::string* answer);

// The server's token counter for text prompts: POST /tokenize (loom, vLLM)
// or /extras/tokenize (llama-cpp-python). nullopt when neither answers.
std::optional<int64_t> count_tokens_remote(const std::string& base_url, const std::string& model,
                                           const std::string& text);

// The first model the server lists at /v1/models, "" if none. api_key: sent
// as a Bearer token when not empty.
std::string first_model(const std::string& base_url, const std::string& api_key = "");

}  // namespace loom::bench
