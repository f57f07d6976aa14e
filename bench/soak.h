// The soak run of `loom bench serve --soak-minutes M`: a mixed workload
// against an OpenAI-compatible server for a stated duration - streams,
// non-streaming requests, clients that disconnect mid-stream or before the
// answer, malformed and invalid requests, and a tenant held at its limit -
// with a fixed number of requests in flight, after a burst of long prompts
// that makes the engine run its largest step (buffers at their high-water
// mark before the RSS slope starts). Every minute one JSON line:
// the window's requests by kind and status, unexpected answers, TTFT and
// E2E percentiles, and the server's RSS (VmRSS and RssAnon), open fds, KV
// blocks and queue gauges. At the end: the whole run's tally, the KV blocks
// after the last request drained, and the least-squares slope of RSS over
// the samples after warm-up (MB/hour). Requests run on one io_context
// thread; a second thread samples /proc and /metrics.
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace loom::bench {

struct SoakOptions {
  std::string base_url;
  std::string model;
  double duration_s = 3600;
  double report_interval_s = 60;  // one JSON line per interval
  double sample_interval_s = 10;  // server samples (the slope's points)
  double warmup_s = -1;           // slopes from here on; < 0: min(600, duration / 6)
  int64_t concurrency = 8;        // requests in flight (a tenant pair counts once)
  uint64_t seed = 0;
  std::string api_key;            // sent as Bearer on every request; "" none
  std::string limited_api_key;    // a tenant limited to one request at a time; "": no such kind
  int64_t server_pid = 0;         // local server: RSS and fds from /proc; 0: none
  std::vector<int32_t> token_ids;  // prompt ids are drawn from these
  int32_t max_output_tokens = 48;
  double timeout_s = 300;
};

// Runs the soak; writes each interval's JSON line to `lines` as it ends
// (flushed), and returns the final report. Throws loom::Error when the server
// cannot be reached at the start.
nlohmann::json run_soak(const SoakOptions& options, std::FILE* lines);

}  // namespace loom::bench
