// StepProfile: where the engine's steps spend their time, by kind of step
// (decode only, prefill only, both) and by how the forward pass ran
// (replayed from a recorded graph, or op by op). Sums and counts only, so two
// snapshots subtract into the profile of the interval between them. Filled by
// the engine when EngineConfig::profile_steps is set (engine/step_profiler.h).
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>

namespace loom {

enum class StepKind : uint8_t { Decode, Prefill, Mixed };
inline constexpr int kNumStepKinds = 3;
const char* step_kind_name(StepKind kind);

// Host phases of one engine-loop turn, on the engine thread's steady clock.
enum class StepPhase : uint8_t {
  Schedule,  // inbox and the scheduler's plan
  Prepare,   // copy-on-write block copies queued, the model input built
  Upload,    // token ids, positions and attention metadata to the device
  Launch,    // host time to queue the forward pass (or replay its recording);
             // on a synchronous backend (CPU) this is the forward pass itself
  Wait,      // waiting for the previous step's tokens (async scheduling)
  Sample,    // token choice on the logits (synchronous steps wait for the device here)
  Apply,     // outputs applied (stop checks, detokenisation), events handed to delivery
  Propose,   // speculative drafts for the next step
};
inline constexpr int kNumStepPhases = 8;
const char* step_phase_name(StepPhase phase);

struct StepTimes {
  uint64_t steps = 0;
  double wall_s = 0;  // loop turn, first phase to last (the phases plus what no phase covers)
  std::array<double, kNumStepPhases> phase_s{};
  // From the step's first timing mark to its last, on the device's clock:
  // the device's span of the step (its work and any wait for the host in
  // between). Steps whose marks the device has not passed yet are not counted.
  uint64_t device_steps = 0;
  double device_span_s = 0;
  // From the previous step's last mark to this step's first: the device
  // idle between steps. Not counted across a time the engine had no work.
  uint64_t device_gaps = 0;
  double device_gap_s = 0;

  StepTimes& operator+=(const StepTimes& o);
  StepTimes& operator-=(const StepTimes& o);
};

struct StepProfile {
  bool enabled = false;
  bool device_clock = false;  // device times from the device (CUDA events); else the host clock
  std::array<std::array<StepTimes, 2>, kNumStepKinds> steps{};  // [kind][replayed from a graph]
  // Loop turns that ran no step (waiting for the last step's tokens, expired requests).
  StepTimes idle_turns;
  // The delivery thread: requests' callbacks (server: response formatting and writes).
  uint64_t callback_batches = 0;
  double callback_s = 0;

  StepTimes& at(StepKind kind, bool replayed) { return steps[size_t(kind)][replayed ? 1 : 0]; }
  const StepTimes& at(StepKind kind, bool replayed) const {
    return steps[size_t(kind)][replayed ? 1 : 0];
  }
  StepTimes total() const;  // every step of every kind
};

// `after` minus `before` (sums and counts; the flags of `after`).
StepProfile operator-(const StepProfile& after, const StepProfile& before);

// The profile's sums and counts as JSON, and back (from_json throws
// loom::Error on a malformed object): the server's /debug/step_profile.
nlohmann::json to_json(const StepProfile& p);
StepProfile step_profile_from_json(const nlohmann::json& j);

}  // namespace loom
