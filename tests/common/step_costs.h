// Step costs for deterministic speculation-policy decisions in the engine
// tests (SpeculativeConfig::fixed_step_seconds): 10 ms a step plus, per query
// token, 0.05 ms (bound by reading the weights: speculation pays even with
// many sequences) or 1 ms (a verify of 4 draft tokens costs 1.4 plain steps).
#pragma once

#include <cstdint>

namespace loom::testing_util {

inline double weight_bound_seconds(int32_t tokens) {
  return 0.010 + 0.00005 * double(tokens - 1);
}

inline double compute_bound_seconds(int32_t tokens) {
  return 0.010 + 0.001 * double(tokens - 1);
}

}  // namespace loom::testing_util
