#include "serve_stats.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "report.h"

namespace loom::bench {

double RequestRecord::tpot() const {
  if (!ok || output_tokens < 2 || chunk_s.empty()) return 0;
  return (e2e() - ttft()) / static_cast<double>(output_tokens - 1);
}

bool meets_slo(const RequestRecord& r, const Slo& slo) {
  if (!r.ok || r.chunk_s.empty()) return false;
  if (slo.ttft_ms > 0 && r.ttft() * 1e3 > slo.ttft_ms) return false;
  if (slo.tpot_ms > 0 && r.output_tokens >= 2 && r.tpot() * 1e3 > slo.tpot_ms) return false;
  if (slo.e2e_ms > 0 && r.e2e() * 1e3 > slo.e2e_ms) return false;
  return true;
}

namespace {
// Rounds to a multiple of unit (0.1, 1e-3...): divides by 1/unit so that
// 5.3 prints as 5.3, not 5.300000000000001.
double round_to(double x, double unit) {
  return std::round(x / unit) / std::round(1.0 / unit);
}
}  // namespace

nlohmann::json summarize(const std::vector<RequestRecord>& records, double duration_s,
                         const Slo& slo, size_t max_error_messages) {
  std::vector<double> ttft, tpot, itl, e2e;
  int64_t in_tokens = 0, out_tokens = 0, ok = 0, good = 0, usage = 0;
  nlohmann::json messages = nlohmann::json::array();
  for (const auto& r : records) {
    if (!r.ok) {
      if (messages.size() < max_error_messages) messages.push_back(r.error);
      continue;
    }
    ++ok;
    usage += r.usage_reported;
    in_tokens += r.prompt_tokens;
    out_tokens += r.output_tokens;
    good += meets_slo(r, slo);
    e2e.push_back(r.e2e() * 1e3);
    if (r.chunk_s.empty()) continue;
    ttft.push_back(r.ttft() * 1e3);
    if (r.output_tokens >= 2) tpot.push_back(r.tpot() * 1e3);
    for (size_t k = 1; k < r.chunk_s.size(); ++k)
      itl.push_back((r.chunk_s[k] - r.chunk_s[k - 1]) * 1e3);
  }
  const double d = duration_s > 0 ? duration_s : 0;
  auto per_s = [&](double n, double unit) { return d > 0 ? round_to(n / d, unit) : 0.0; };
  nlohmann::json j;
  j["num_requests"] = records.size();
  j["completed"] = ok;
  j["errors"] = static_cast<int64_t>(records.size()) - ok;
  j["error_messages"] = messages;
  j["duration_s"] = round_to(d, 1e-3);
  j["requests_per_s"] = per_s(double(ok), 1e-3);
  j["input_tokens"] = in_tokens;
  j["output_tokens"] = out_tokens;
  j["input_tokens_per_s"] = per_s(double(in_tokens), 0.1);
  j["output_tokens_per_s"] = per_s(double(out_tokens), 0.1);
  j["total_tokens_per_s"] = per_s(double(in_tokens + out_tokens), 0.1);
  j["token_counts_from_usage"] = usage == ok;
  j["ttft_ms"] = to_json(percentiles(ttft));
  j["tpot_ms"] = to_json(percentiles(tpot));
  j["itl_ms"] = to_json(percentiles(itl));
  j["e2e_ms"] = to_json(percentiles(e2e));
  j["goodput"] = {
      {"slo_ttft_ms", slo.ttft_ms},
      {"slo_tpot_ms", slo.tpot_ms},
      {"slo_e2e_ms", slo.e2e_ms},
      {"requests_meeting_slo", good},
      {"fraction", records.empty() ? 0.0 : round_to(double(good) / double(records.size()), 1e-4)},
      {"requests_per_s", per_s(double(good), 1e-3)}};
  return j;
}

std::vector<double> poisson_arrivals(size_t n, double rate, uint64_t seed) {
  std::vector<double> t(n, 0.0);
  if (!(rate > 0) || std::isinf(rate)) return t;
  std::mt19937_64 rng(seed);
  double now = 0;
  for (size_t i = 0; i < n; ++i) {
    // u in (0, 1]: -log(u) is a unit exponential; the first request waits too,
    // like every later one (arrivals of a process that started at 0).
    const double u = (static_cast<double>(rng() >> 11) + 1.0) * 0x1.0p-53;
    now += -std::log(u) / rate;
    t[i] = now;
  }
  return t;
}

namespace {

// Metric name -> key in the report. Gauges report first/peak/last, counters
// (marked) the increase over the run.
struct Known {
  const char* metric;
  const char* key;
  bool counter;
};
constexpr Known kKnown[] = {
    // loom (src/server/openai_server.cpp)
    {"loom_kv_cache_usage_ratio", "kv_cache_usage_ratio", false},
    {"loom_kv_cache_used_blocks", "kv_cache_used_blocks", false},
    {"loom_kv_cache_total_blocks", "kv_cache_total_blocks", false},
    {"loom_num_requests_running", "requests_running", false},
    {"loom_num_requests_waiting", "requests_waiting", false},
    {"loom_preemptions_total", "preemptions", true},
    {"loom_prefix_cache_queried_tokens_total", "prefix_cache_queried_tokens", true},
    {"loom_prefix_cache_hit_tokens_total", "prefix_cache_hit_tokens", true},
    {"loom_spec_decode_draft_tokens_total", "spec_decode_draft_tokens", true},
    {"loom_spec_decode_accepted_tokens_total", "spec_decode_accepted_tokens", true},
    {"loom_spec_decode_acceptance_length_total", "spec_decode_verify_steps", true},
    {"loom_jump_forward_tokens_total", "jump_forward_tokens", true},
    {"loom_jump_forward_accepted_tokens_total", "jump_forward_accepted_tokens", true},
    {"loom_engine_steps_total", "engine_steps", true},
    // vLLM's speculative-decoding counters
    {"vllm:spec_decode_num_draft_tokens_total", "spec_decode_draft_tokens", true},
    {"vllm:spec_decode_num_accepted_tokens_total", "spec_decode_accepted_tokens", true},
    // vLLM
    {"vllm:kv_cache_usage_perc", "kv_cache_usage_ratio", false},
    {"vllm:gpu_cache_usage_perc", "kv_cache_usage_ratio", false},
    {"vllm:num_requests_running", "requests_running", false},
    {"vllm:num_requests_waiting", "requests_waiting", false},
    {"vllm:num_preemptions_total", "preemptions", true},
    // SGLang
    {"sglang:token_usage", "kv_cache_usage_ratio", false},
    {"sglang:num_running_reqs", "requests_running", false},
    {"sglang:num_queue_reqs", "requests_waiting", false},
    // llama.cpp's own server (--metrics)
    {"llamacpp:kv_cache_usage_ratio", "kv_cache_usage_ratio", false},
    {"llamacpp:requests_processing", "requests_running", false},
    {"llamacpp:requests_deferred", "requests_waiting", false},
    // any server exporting the standard process collector
    {"process_resident_memory_bytes", "resident_memory_bytes", false},
};

}  // namespace

void ServerMetricsTracker::record(const std::string& key, double v, bool is_first) {
  auto it =
      std::find_if(values_.begin(), values_.end(), [&](const auto& kv) { return kv.first == key; });
  if (it == values_.end()) {
    values_.emplace_back(key, Gauge{});
    it = values_.end() - 1;
  }
  Gauge& g = it->second;
  if (is_first || std::isnan(g.first)) g.first = v;
  g.last = v;
  if (std::isnan(g.peak) || v > g.peak) g.peak = v;
}

void ServerMetricsTracker::observe(const std::vector<net::PromSample>& samples, bool is_first) {
  ++scrapes_;
  // Several series of one family (labels: model, engine...) are summed.
  std::vector<std::pair<std::string, double>> sums;
  for (const auto& s : samples)
    for (const auto& k : kKnown)
      if (s.name == k.metric) {
        const std::string key = std::string(k.counter ? "counter:" : "gauge:") + k.key;
        auto it =
            std::find_if(sums.begin(), sums.end(), [&](const auto& kv) { return kv.first == key; });
        if (it == sums.end())
          sums.emplace_back(key, s.value);
        else
          it->second += s.value;
      }
  for (const auto& [key, v] : sums) record(key, v, is_first);
}

void ServerMetricsTracker::observe_rss(int64_t rss_bytes, int64_t hwm_bytes) {
  peak_rss_ = std::max(peak_rss_, rss_bytes);
  hwm_ = std::max(hwm_, hwm_bytes);
}

nlohmann::json ServerMetricsTracker::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  j["scrapes"] = scrapes_;
  for (const auto& [key, g] : values_) {
    if (key.rfind("counter:", 0) == 0) {
      j[key.substr(8)] = round_to(g.last - g.first, 1e-6);
    } else {
      const std::string k = key.substr(6);
      j[k] = {{"before", round_to(g.first, 1e-6)},
              {"peak", round_to(g.peak, 1e-6)},
              {"after", round_to(g.last, 1e-6)}};
    }
  }
  if (hwm_ > 0 || peak_rss_ > 0) {
    j["process_peak_rss_mib"] = std::max(hwm_, peak_rss_) >> 20;
  }
  // Speculative decoding: the share of draft tokens accepted, and the tokens
  // a verify step gave on average (accepted + its own).
  const double drafted = j.value("spec_decode_draft_tokens", 0.0);
  const double accepted = j.value("spec_decode_accepted_tokens", 0.0);
  const double steps = j.value("spec_decode_verify_steps", 0.0);
  if (drafted > 0) j["spec_decode_acceptance_rate"] = round_to(accepted / drafted, 1e-4);
  if (steps > 0) j["spec_decode_mean_accepted_length"] = round_to(1.0 + accepted / steps, 1e-4);
  return j;
}

}  // namespace loom::bench
