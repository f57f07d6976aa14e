// `loom bench serve --profile`: where a loom server's time went during a
// run. Before and after the run the client reads the engine's step profile
// (GET /debug/step_profile; the server runs with --profile-steps) and the
// request-stage histograms of /metrics; the report holds the difference:
// the step profile's tables (step_profile_report.h) and per stage the
// requests and mean milliseconds. Reading the HTTP request itself (before the
// server's handler runs) is not measured by the server.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "engine/step_profile.h"

namespace loom::bench {

struct ServerProfile {
  std::optional<StepProfile> steps;  // none: the server has no step profile (not loom, or off)
  std::map<std::string, std::pair<double, double>> stages;  // histogram name -> (sum s, count)
};

// The server's figures now. Throws loom::Error when the server answers
// /debug/step_profile with something other than a step profile or a 404.
ServerProfile read_server_profile(const std::string& base_url);

// The request-stage histograms of a /metrics text (sum and count each).
std::map<std::string, std::pair<double, double>> request_stages(const std::string& metrics_text);

// after - before: {"step_profile": ..., "server_stages": {...}} (a key only
// when the server had it). run_s: the run's wall time.
nlohmann::json server_profile_report(const ServerProfile& before, const ServerProfile& after,
                                     double run_s);

}  // namespace loom::bench
