// Pure pieces of the serving benchmark (`loom bench serve`): per-request
// timing records and their summary (throughput, TTFT/TPOT/ITL/E2E
// percentiles, goodput under an SLO, errors), Poisson arrival times, and the
// server figures read from /metrics (parsed by net/prometheus_text.h). No I/O
// here.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "net/prometheus_text.h"

namespace loom::bench {

// One streamed request as the client saw it. Times are seconds since the run
// began (steady clock).
struct RequestRecord {
  double send_s = 0;            // request written to the socket (queued if connecting)
  std::vector<double> chunk_s;  // arrival of every chunk that carried generated text
  double done_s = 0;            // end of the stream ([DONE] or last byte)
  int64_t prompt_tokens = 0;    // from the usage chunk, else the workload's length
  int64_t output_tokens = 0;    // from the usage chunk, else the number of text chunks
  bool usage_reported = false;  // the server sent usage (stream_options.include_usage)
  bool ok = false;
  std::string error;  // first error seen (HTTP status, body or transport)

  double ttft() const { return chunk_s.empty() ? 0 : chunk_s.front() - send_s; }
  double e2e() const { return done_s - send_s; }
  // (e2e - ttft) / (output tokens - 1); 0 with fewer than 2 tokens.
  double tpot() const;
};

// Service-level objective for goodput: a request counts when it succeeded and
// met every bound that is set (<= 0 means no bound).
struct Slo {
  double ttft_ms = 200;
  double tpot_ms = 50;
  double e2e_ms = 0;
};
bool meets_slo(const RequestRecord& r, const Slo& slo);

// Summary of a run over `duration_s` (first send to last completion):
// requests, errors (count + first messages), tokens and rates, latency
// percentiles in ms, goodput. Field names follow `loom bench offline`.
nlohmann::json summarize(const std::vector<RequestRecord>& records, double duration_s,
                         const Slo& slo, size_t max_error_messages = 5);

// Send times (seconds from 0) of n requests arriving as a Poisson process of
// `rate` requests/s: exponential gaps, seeded (same stream with any standard
// library). rate = +inf: all at 0.
std::vector<double> poisson_arrivals(size_t n, double rate, uint64_t seed);

// Server-side figures scraped from /metrics before, during and after a run:
// peaks of gauges (KV usage, memory, running/waiting requests) and deltas of
// counters (preemptions, prefix-cache hits). Knows the names of loom, vLLM,
// SGLang and llama.cpp; unknown servers leave it empty.
class ServerMetricsTracker {
 public:
  void observe(const std::vector<net::PromSample>& samples, bool is_first);
  void observe_rss(int64_t rss_bytes, int64_t hwm_bytes);
  int scrapes() const { return scrapes_; }
  nlohmann::json to_json() const;

 private:
  struct Gauge {
    double first = std::numeric_limits<double>::quiet_NaN();
    double last = std::numeric_limits<double>::quiet_NaN();
    double peak = std::numeric_limits<double>::quiet_NaN();
  };
  void record(const std::string& key, double v, bool is_first);
  std::vector<std::pair<std::string, Gauge>> values_;
  int scrapes_ = 0;
  int64_t peak_rss_ = 0, hwm_ = 0;
};

}  // namespace loom::bench
