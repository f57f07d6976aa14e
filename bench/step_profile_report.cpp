#include "step_profile_report.h"

#include <cmath>
#include <cstdio>
#include <string>

namespace loom::bench {

namespace {

double round3(double x) {
  return std::round(x * 1000.0) / 1000.0;
}

nlohmann::json total_mean_ms(double seconds, uint64_t count) {
  return {{"total_ms", round3(seconds * 1e3)},
          {"mean_ms", count ? round3(seconds * 1e3 / double(count)) : 0.0}};
}

nlohmann::json times_report(const std::string& kind, const std::string& forward,
                            const StepTimes& t) {
  nlohmann::json r = {{"kind", kind}, {"forward", forward}, {"steps", t.steps}};
  r["wall"] = total_mean_ms(t.wall_s, t.steps);
  double phases = 0;
  for (int p = 0; p < kNumStepPhases; ++p) {
    r[step_phase_name(StepPhase(p))] = total_mean_ms(t.phase_s[size_t(p)], t.steps);
    phases += t.phase_s[size_t(p)];
  }
  r["other"] = total_mean_ms(std::max(0.0, t.wall_s - phases), t.steps);
  r["device_span"] = total_mean_ms(t.device_span_s, t.device_steps);
  r["device_span"]["steps"] = t.device_steps;
  r["device_gap"] = total_mean_ms(t.device_gap_s, t.device_gaps);
  r["device_gap"]["gaps"] = t.device_gaps;
  return r;
}

}  // namespace

nlohmann::json step_profile_report(const StepProfile& p, double run_s) {
  nlohmann::json rows = nlohmann::json::array();
  for (int k = 0; k < kNumStepKinds; ++k)
    for (int g = 0; g < 2; ++g) {
      const StepTimes& t = p.steps[size_t(k)][size_t(g)];
      if (t.steps > 0)
        rows.push_back(times_report(step_kind_name(StepKind(k)), g ? "graph" : "eager", t));
    }
  const StepTimes all = p.total();
  rows.push_back(times_report("all", "", all));
  if (p.idle_turns.steps > 0) rows.push_back(times_report("no step", "", p.idle_turns));
  return {{"clock", p.device_clock
                        ? "device spans and gaps: CUDA events on the backend's stream"
                        : "device spans and gaps: host clock (a synchronous backend: the span is "
                          "the host's step time)"},
          {"run_s", round3(run_s)},
          {"steps_wall_share", run_s > 0 ? round3(all.wall_s / run_s) : 0.0},
          {"device_span_share", run_s > 0 ? round3(all.device_span_s / run_s) : 0.0},
          {"rows", rows},
          {"callbacks",
           {{"batches", p.callback_batches},
            {"total_ms", round3(p.callback_s * 1e3)},
            {"mean_ms",
             p.callback_batches ? round3(p.callback_s * 1e3 / double(p.callback_batches)) : 0.0}}}};
}

void print_step_profile_tables(const nlohmann::json& report) {
  static const char* kColumns[] = {"wall",    "schedule", "prepare",     "upload",
                                   "launch",  "wait",     "sample",      "apply",
                                   "propose", "other",    "device_span", "device_gap"};
  for (const char* unit : {"mean_ms", "total_ms"}) {
    std::printf("\nstep profile, %s (%s)\n\n| kind | forward | steps |",
                std::string(unit) == "mean_ms" ? "ms per step" : "ms in all",
                report.value("clock", "").c_str());
    for (const char* c : kColumns) std::printf(" %s |", c);
    std::printf("\n| --- | --- | --- |");
    for (size_t i = 0; i < std::size(kColumns); ++i) std::printf(" --- |");
    std::printf("\n");
    for (const auto& r : report.at("rows")) {
      std::printf("| %s | %s | %s |", r.at("kind").get<std::string>().c_str(),
                  r.at("forward").get<std::string>().c_str(), r.at("steps").dump().c_str());
      for (const char* c : kColumns) std::printf(" %.3f |", r.at(c).at(unit).get<double>());
      std::printf("\n");
    }
  }
  const auto& cb = report.at("callbacks");
  std::printf("\ndelivery thread: %s callback batches, %.3f ms in all, %.3f ms each\n",
              cb.at("batches").dump().c_str(), cb.at("total_ms").get<double>(),
              cb.at("mean_ms").get<double>());
}

}  // namespace loom::bench
