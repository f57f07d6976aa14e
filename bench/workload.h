// Benchmark workloads, written once and shared by every benchmark and peer run
// (peers read the JSONL that `loom bench workload` writes), so figures compare.
// ShareGPT-like (seeded): prompt length = clamp(int(lognormal(5.3, 0.9)), 4, 1024),
// output length = clamp(int(lognormal(5.2, 0.8)), 4, 1024) (medians ~200 and
// ~180 tokens), prompt ids uniform over the vocabulary minus special tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::bench {

struct WorkloadRequest {
  std::vector<int32_t> prompt_ids;
  int32_t output_len = 0;
};

struct WorkloadSpec {
  std::string dataset = "sharegpt";  // sharegpt | fixed
  int64_t num_requests = 100;
  uint64_t seed = 0;
  int32_t input_len = 128;   // fixed
  int32_t output_len = 128;  // fixed
  int32_t max_len = 1024;    // cap for sharegpt lengths
};

// `allowed_ids` are the token ids prompts draw from (the vocabulary minus
// special tokens). Throws loom::Error on a bad spec.
std::vector<WorkloadRequest> make_workload(const WorkloadSpec& spec,
                                           const std::vector<int32_t>& allowed_ids);

// One JSON object per line: {"prompt_ids": [...], "output_len": N}.
void write_workload_jsonl(const std::vector<WorkloadRequest>& reqs, const std::string& path);
std::vector<WorkloadRequest> read_workload_jsonl(const std::string& path);

}  // namespace loom::bench
