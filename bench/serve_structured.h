// Structured output's cost as `loom bench serve --json-schema` measures it:
// the same workload unconstrained and under a JSON schema in one run, the
// server's per-token mask times (its loom_grammar_mask_seconds histogram,
// read from /metrics before and after the constrained part), and the time to
// first token a grammar compile adds with a cold and a warm cache. The pieces
// here are pure (no I/O); tools/cmd_bench_serve.cpp drives them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "net/prometheus_text.h"

namespace loom::bench {

// The response_format that constrains a request to `schema`. A non-empty
// `nonce` goes into the schema's title: the same grammar under a cache key of
// its own (a cold compile).
nlohmann::json json_schema_format(const nlohmann::json& schema, const std::string& nonce = "");

// One unlabelled histogram series of a /metrics text.
struct PromHistogram {
  bool found = false;
  std::vector<double> bounds;      // finite upper bounds, ascending
  std::vector<double> cumulative;  // per bound, then +Inf
  double sum = 0;
  double count = 0;
};
PromHistogram read_histogram(const std::vector<net::PromSample>& samples, const std::string& name);

// The observations between two scrapes (after - before): count, mean and the
// p50 / p90 / p99 (linear within a bucket), in microseconds. {} when the
// server has no such histogram.
nlohmann::json histogram_delta_us(const PromHistogram& before, const PromHistogram& after);

}  // namespace loom::bench
