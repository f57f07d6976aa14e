// The engine's step profile (engine/step_profile.h) as a benchmark report:
// per kind of step, count and total / mean milliseconds of every host phase,
// of the device's span of the step and of the device's idle gap before it;
// printed as Markdown tables after the report's JSON line.
#pragma once

#include <nlohmann/json.hpp>

#include "engine/step_profile.h"

namespace loom::bench {

// The report's "step_profile" object. run_s: the run's wall time (each
// kind's share of it is reported).
nlohmann::json step_profile_report(const StepProfile& profile, double run_s);

// Prints a step_profile_report as two Markdown tables: mean ms per step, and
// total seconds, one row per kind of step that ran.
void print_step_profile_tables(const nlohmann::json& report);

}  // namespace loom::bench
