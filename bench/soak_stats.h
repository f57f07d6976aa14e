// Pure pieces of the soak run (`loom bench serve --soak-minutes`): the kinds
// of request it mixes and what counts as the expected answer to each, the
// least-squares slope of a series over time (RSS growth), and the per-window
// tally. No I/O here.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace loom::bench {

enum class SoakKind {
  Stream,            // streamed completion, read to [DONE]
  ChatStream,        // streamed chat completion (text), read to [DONE]
  Plain,             // non-streaming completion
  StreamDisconnect,  // streamed, the client goes away after a few events
  PlainDisconnect,   // non-streaming, the client goes away before the answer
  BadRequest,        // malformed or invalid: a 4xx with an error body expected
  Tokenize,          // POST /tokenize
  TenantAtLimit,     // two at once on a tenant limited to one: 200 or 429
};
const char* soak_kind_name(SoakKind kind);
const std::vector<SoakKind>& soak_kinds();

// Relative frequency of each kind in the mix (sums to 1).
double soak_kind_weight(SoakKind kind);

// One finished request.
struct SoakRecord {
  SoakKind kind = SoakKind::Stream;
  double send_s = 0;
  double first_token_s = -1;  // streamed text's first chunk; < 0: none
  double done_s = 0;
  int status = 0;             // HTTP status; 0: none (cancelled or transport error)
  bool expected = false;      // the answer was what this kind should get
  std::string problem;        // why not, when !expected
};

// Least-squares slope of y over x; 0 with fewer than two distinct x.
double least_squares_slope(const std::vector<double>& x, const std::vector<double>& y);

// Counts and latencies of the records of one window (or of a whole run):
// {"requests": {kind: n}, "unexpected": n, "unexpected_examples": [...],
//  "statuses": {"200": n, ...}, "ttft_ms": {...}, "e2e_ms": {...}}.
nlohmann::json soak_window_summary(const std::vector<SoakRecord>& records,
                                   size_t max_examples = 3);

// One look at the server process and its /metrics.
struct SoakServerSample {
  double t_s = 0;
  int64_t rss_bytes = 0;       // VmRSS
  int64_t rss_anon_bytes = 0;  // RssAnon: the heap (the mmapped model is RssFile)
  int64_t rss_file_bytes = 0;
  int64_t fds = 0;
  double kv_used_blocks = 0, kv_total_blocks = 0;
  double running = 0, waiting = 0, http_in_flight = 0;
};
nlohmann::json to_json(const SoakServerSample& s);

// RSS figures over a run: first/last/min/max and the slopes (MB/hour) of
// VmRSS and RssAnon over the samples taken at or after warmup_s, and of fds
// (per hour).
nlohmann::json soak_memory_summary(const std::vector<SoakServerSample>& samples, double warmup_s);

}  // namespace loom::bench
