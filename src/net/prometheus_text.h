// A reader of the Prometheus text exposition format (what /metrics serves):
// the samples of loom, vLLM, SGLang and llama.cpp servers, for the router's
// load scrape and the serving benchmark. Pure parsing, no I/O.
#pragma once

#include <string>
#include <vector>

namespace loom::net {

// One sample of a Prometheus text exposition: `name{labels} value`.
struct PromSample {
  std::string name;
  std::string labels;  // raw text inside the braces, "" when none
  double value = 0;
};
// Skips comments, blank and malformed lines; tolerates timestamps.
std::vector<PromSample> parse_prometheus(const std::string& text);

}  // namespace loom::net
