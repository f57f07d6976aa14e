// Drives an Engine with many requests at once and records when each token
// arrived, for the offline and latency benchmarks.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "engine/engine.h"
#include "report.h"

namespace loom::bench {

struct RequestTiming {
  double submit_s = 0;                 // seconds since the run began
  std::vector<double> token_s;         // arrival of each generated token
  int32_t prompt_tokens = 0;
  bool error = false;
};

struct RunResult {
  std::vector<RequestTiming> requests;
  double duration_s = 0;               // first submit to last token
  int32_t peak_used_blocks = 0;        // sampled while running
  double peak_kv_waste = 0;
  EngineStats stats_before, stats_after;
};

// Submits every request at t=0 to a started engine and waits for all.
RunResult run_all(Engine& engine, std::vector<Request> requests);

// Latency figures of a run: TTFT, TPOT (per request: (last - first) / (n - 1)),
// ITL (every gap), E2E, in milliseconds.
nlohmann::json latency_report(const RunResult& run);

}  // namespace loom::bench
