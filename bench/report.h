// Benchmark reports: latency percentiles and a printer that writes the same
// figures as JSON (one object, machine-readable) and as a Markdown table.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace loom::bench {

struct Percentiles {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};
// Of `values` (any order); all zero when empty.
Percentiles percentiles(std::vector<double> values);
nlohmann::json to_json(const Percentiles& p);

// Peak resident memory of this process (VmHWM), in bytes; 0 if unknown.
int64_t peak_rss_bytes();

// Prints `report` as a Markdown table of its scalar and percentile fields to
// stderr-free stdout after the JSON line, or JSON only with json_only; a
// "step_profile" object gets tables of its own (step_profile_report.h).
void print_report(const nlohmann::json& report, bool json_only);

}  // namespace loom::bench
