// StepProfile arithmetic and its JSON form.
#include "engine/step_profile.h"

#include <string>

#include "core/error.h"

namespace loom {

namespace {
constexpr const char* kKindNames[kNumStepKinds] = {"decode", "prefill", "mixed"};
constexpr const char* kPhaseNames[kNumStepPhases] = {"schedule", "prepare", "upload", "launch",
                                                     "wait",     "sample",  "apply",  "propose"};
constexpr const char* kGraphNames[2] = {"eager", "graph"};

nlohmann::json times_json(const StepTimes& t) {
  nlohmann::json phases = nlohmann::json::object();
  for (int p = 0; p < kNumStepPhases; ++p) phases[kPhaseNames[p]] = t.phase_s[size_t(p)];
  return {{"steps", t.steps},
          {"wall_s", t.wall_s},
          {"phase_s", phases},
          {"device_steps", t.device_steps},
          {"device_span_s", t.device_span_s},
          {"device_gaps", t.device_gaps},
          {"device_gap_s", t.device_gap_s}};
}

StepTimes times_from_json(const nlohmann::json& j) {
  LOOM_CHECK(j.is_object(), "step profile: a step entry is not an object");
  StepTimes t;
  t.steps = j.at("steps").get<uint64_t>();
  t.wall_s = j.at("wall_s").get<double>();
  for (int p = 0; p < kNumStepPhases; ++p)
    t.phase_s[size_t(p)] = j.at("phase_s").at(kPhaseNames[p]).get<double>();
  t.device_steps = j.at("device_steps").get<uint64_t>();
  t.device_span_s = j.at("device_span_s").get<double>();
  t.device_gaps = j.at("device_gaps").get<uint64_t>();
  t.device_gap_s = j.at("device_gap_s").get<double>();
  return t;
}
}  // namespace

const char* step_kind_name(StepKind kind) {
  return kKindNames[size_t(kind)];
}
const char* step_phase_name(StepPhase phase) {
  return kPhaseNames[size_t(phase)];
}

StepTimes& StepTimes::operator+=(const StepTimes& o) {
  steps += o.steps;
  wall_s += o.wall_s;
  for (size_t p = 0; p < phase_s.size(); ++p) phase_s[p] += o.phase_s[p];
  device_steps += o.device_steps;
  device_span_s += o.device_span_s;
  device_gaps += o.device_gaps;
  device_gap_s += o.device_gap_s;
  return *this;
}

StepTimes& StepTimes::operator-=(const StepTimes& o) {
  steps -= o.steps;
  wall_s -= o.wall_s;
  for (size_t p = 0; p < phase_s.size(); ++p) phase_s[p] -= o.phase_s[p];
  device_steps -= o.device_steps;
  device_span_s -= o.device_span_s;
  device_gaps -= o.device_gaps;
  device_gap_s -= o.device_gap_s;
  return *this;
}

StepTimes StepProfile::total() const {
  StepTimes t;
  for (const auto& kind : steps)
    for (const StepTimes& s : kind) t += s;
  return t;
}

StepProfile operator-(const StepProfile& after, const StepProfile& before) {
  StepProfile d = after;
  for (size_t k = 0; k < d.steps.size(); ++k)
    for (size_t g = 0; g < 2; ++g) d.steps[k][g] -= before.steps[k][g];
  d.idle_turns -= before.idle_turns;
  d.callback_batches -= before.callback_batches;
  d.callback_s -= before.callback_s;
  return d;
}

nlohmann::json to_json(const StepProfile& p) {
  nlohmann::json steps = nlohmann::json::object();
  for (int k = 0; k < kNumStepKinds; ++k)
    for (int g = 0; g < 2; ++g)
      steps[std::string(kKindNames[k]) + "/" + kGraphNames[g]] =
          times_json(p.steps[size_t(k)][size_t(g)]);
  return {{"enabled", p.enabled},
          {"device_clock", p.device_clock},
          {"steps", steps},
          {"idle_turns", times_json(p.idle_turns)},
          {"callback_batches", p.callback_batches},
          {"callback_s", p.callback_s}};
}

StepProfile step_profile_from_json(const nlohmann::json& j) {
  try {
    StepProfile p;
    p.enabled = j.at("enabled").get<bool>();
    p.device_clock = j.at("device_clock").get<bool>();
    for (int k = 0; k < kNumStepKinds; ++k)
      for (int g = 0; g < 2; ++g)
        p.steps[size_t(k)][size_t(g)] =
            times_from_json(j.at("steps").at(std::string(kKindNames[k]) + "/" + kGraphNames[g]));
    p.idle_turns = times_from_json(j.at("idle_turns"));
    p.callback_batches = j.at("callback_batches").get<uint64_t>();
    p.callback_s = j.at("callback_s").get<double>();
    return p;
  } catch (const nlohmann::json::exception& e) {
    LOOM_THROW("step profile: malformed JSON ({})", e.what());
  }
}

}  // namespace loom
