#include "serve_profile.h"

#include <cmath>

#include "core/error.h"
#include "net/http_client.h"
#include "net/prometheus_text.h"
#include "net/url.h"
#include "step_profile_report.h"

namespace loom::bench {

namespace {
// loom's request-stage histograms (server/openai_server.cpp), by report name.
constexpr std::pair<const char*, const char*> kStages[] = {
    {"prepare", "loom_request_prepare_seconds"},
    {"queue", "loom_request_queue_time_seconds"},
    {"prefill", "loom_request_prefill_seconds"},
    {"time_to_first_token", "loom_time_to_first_token_seconds"},
    {"decode", "loom_request_decode_seconds"},
    {"detokenize", "loom_request_detokenize_seconds"},
    {"deliver", "loom_request_deliver_seconds"},
    {"e2e", "loom_e2e_request_latency_seconds"},
};
}  // namespace

std::map<std::string, std::pair<double, double>> request_stages(const std::string& metrics_text) {
  std::map<std::string, std::pair<double, double>> out;
  for (const net::PromSample& s : net::parse_prometheus(metrics_text))
    for (const auto& [report_name, metric] : kStages) {
      (void)report_name;
      const std::string m = metric;
      if (!s.labels.empty()) continue;
      if (s.name == m + "_sum") out[m].first = s.value;
      if (s.name == m + "_count") out[m].second = s.value;
    }
  return out;
}

ServerProfile read_server_profile(const std::string& base_url) {
  ServerProfile p;
  const net::Url url = net::parse_url(base_url);
  const net::HttpResult steps = net::http_request(url, "GET", "/debug/step_profile", "", 10);
  if (steps.status == 200) {
    const auto j = nlohmann::json::parse(steps.body, nullptr, false);
    if (j.is_discarded()) LOOM_THROW("{}/debug/step_profile: not JSON", base_url);
    p.steps = step_profile_from_json(j);
  } else if (steps.status != 404) {
    LOOM_THROW("{}/debug/step_profile: status {} {}", base_url, steps.status, steps.error);
  }
  const net::HttpResult metrics = net::http_request(url, "GET", "/metrics", "", 10);
  if (metrics.status == 200) p.stages = request_stages(metrics.body);
  return p;
}

nlohmann::json server_profile_report(const ServerProfile& before, const ServerProfile& after,
                                     double run_s) {
  nlohmann::json out = nlohmann::json::object();
  if (before.steps && after.steps)
    out["step_profile"] = step_profile_report(*after.steps - *before.steps, run_s);
  nlohmann::json stages = nlohmann::json::object();
  for (const auto& [report_name, metric] : kStages) {
    const auto a = after.stages.find(metric);
    if (a == after.stages.end()) continue;
    const auto b = before.stages.find(metric);
    const double sum = a->second.first - (b == before.stages.end() ? 0.0 : b->second.first);
    const double count = a->second.second - (b == before.stages.end() ? 0.0 : b->second.second);
    stages[report_name] = {{"requests", count},
                           {"total_s", std::round(sum * 1e4) / 1e4},
                           {"mean_ms", count > 0 ? std::round(sum / count * 1e6) / 1e3 : 0.0}};
  }
  if (!stages.empty()) out["server_stages"] = stages;
  return out;
}

}  // namespace loom::bench
