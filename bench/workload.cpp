#include "workload.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numbers>
#include <random>

#include "core/error.h"

namespace loom::bench {

namespace {

// Box-Muller over mt19937_64 so the stream of lengths is the same with any
// standard library (std::normal_distribution's algorithm is unspecified).
class Normal {
 public:
  explicit Normal(uint64_t seed) : rng_(seed) {}
  double next() {
    const double u1 = (static_cast<double>(rng_() >> 11) + 0.5) * 0x1.0p-53;
    const double u2 = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
  }
  uint64_t raw() { return rng_(); }

 private:
  std::mt19937_64 rng_;
};

int32_t lognormal_len(Normal& n, double mu, double sigma, int32_t lo, int32_t hi) {
  const double v = std::exp(mu + sigma * n.next());
  return static_cast<int32_t>(std::clamp<double>(std::floor(v), lo, hi));
}

}  // namespace

std::vector<WorkloadRequest> make_workload(const WorkloadSpec& spec,
                                           const std::vector<int32_t>& allowed_ids) {
  if (spec.num_requests < 0 || spec.num_requests > 10'000'000)
    LOOM_THROW("--num-requests {} is out of range", spec.num_requests);
  if (allowed_ids.empty()) LOOM_THROW("workload: no token ids to draw prompts from");
  if (spec.dataset != "sharegpt" && spec.dataset != "fixed")
    LOOM_THROW("unknown dataset '{}' (sharegpt, fixed)", spec.dataset);
  if (spec.dataset == "fixed" && (spec.input_len < 1 || spec.output_len < 1))
    LOOM_THROW("fixed dataset needs --input-len and --output-len >= 1");
  Normal rng(spec.seed);
  std::vector<WorkloadRequest> out(spec.num_requests);
  for (auto& r : out) {
    int32_t in_len = spec.input_len, out_len = spec.output_len;
    if (spec.dataset == "sharegpt") {
      in_len = lognormal_len(rng, 5.3, 0.9, 4, spec.max_len);
      out_len = lognormal_len(rng, 5.2, 0.8, 4, spec.max_len);
    }
    r.output_len = out_len;
    r.prompt_ids.resize(in_len);
    for (auto& id : r.prompt_ids) id = allowed_ids[rng.raw() % allowed_ids.size()];
  }
  return out;
}

void write_workload_jsonl(const std::vector<WorkloadRequest>& reqs, const std::string& path) {
  std::ofstream f(path);
  if (!f) LOOM_THROW("cannot write {}", path);
  for (const auto& r : reqs)
    f << nlohmann::json{{"prompt_ids", r.prompt_ids}, {"output_len", r.output_len}}.dump() << "\n";
}

std::vector<WorkloadRequest> read_workload_jsonl(const std::string& path) {
  std::ifstream f(path);
  if (!f) LOOM_THROW("cannot read {}", path);
  std::vector<WorkloadRequest> out;
  std::string line;
  int64_t n = 0;
  while (std::getline(f, line)) {
    ++n;
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("prompt_ids") || !j["prompt_ids"].is_array())
      LOOM_THROW("{}:{}: expected {{\"prompt_ids\": [...], \"output_len\": N}}", path, n);
    WorkloadRequest r;
    for (const auto& v : j["prompt_ids"]) {
      if (!v.is_number_integer()) LOOM_THROW("{}:{}: prompt_ids must be integers", path, n);
      r.prompt_ids.push_back(v.get<int32_t>());
    }
    r.output_len = j.value("output_len", 0);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace loom::bench
