// StepProfiler: fills a StepProfile, one engine-loop turn at a time. Host
// phases are timed with the steady clock by the engine and the executor
// (PhaseTimer); each step's device work is bracketed by two timing marks on
// the backend's stream (Backend::mark_time), which are read only once the
// device has passed them (Backend::seconds_between never waits), a step or
// more later, so profiling never makes the host wait for the device. Exists
// only when profiling is on: the engine and the executor hold a null pointer
// otherwise and take no clock readings. Engine thread only.
#pragma once

#include <chrono>
#include <deque>
#include <memory>

#include "backend/backend.h"
#include "engine/step_profile.h"

namespace loom {

class StepProfiler {
 public:
  explicit StepProfiler(Backend& backend);

  // A loop turn begins (before the inbox is read and the step planned).
  void begin_turn();
  void add(StepPhase phase, double seconds);
  // The turn runs a step of this kind, its forward pass replayed or not.
  void set_kind(StepKind kind) { kind_ = kind; }
  void set_replayed(bool replayed) { replayed_ = replayed; }
  // Timing marks around the step's device work (before its first op and
  // after its last: the tokens' download).
  void mark_start();
  void mark_end();
  // The turn ends; with no step run (no marks) it counts as an idle turn.
  void end_turn();
  // The engine has no work: every mark is resolved (waiting for the device
  // if it has not passed the last ones yet: nothing else is queued) and the
  // next step's gap is not counted (the device waited for requests, not for
  // the host).
  void idle();

  const StepProfile& profile() const { return profile_; }

 private:
  struct Pending {
    StepKind kind;
    bool replayed;
    std::unique_ptr<Backend::TimingMark> start, end;
  };
  // Files the device spans of pending steps whose marks the device passed.
  void resolve();

  using Clock = std::chrono::steady_clock;
  Backend& backend_;
  StepProfile profile_;
  Clock::time_point turn_start_;
  StepTimes turn_;
  StepKind kind_ = StepKind::Decode;
  bool replayed_ = false;
  std::unique_ptr<Backend::TimingMark> start_, end_;
  std::deque<Pending> pending_;
  std::unique_ptr<Backend::TimingMark> last_end_;  // of the last resolved step
};

// Adds the host time of its scope to `phase` (nothing, and no clock reading,
// when profiler is null).
class PhaseTimer {
 public:
  PhaseTimer(StepProfiler* profiler, StepPhase phase)
      : profiler_(profiler),
        phase_(phase),
        start_(profiler ? std::chrono::steady_clock::now()
                        : std::chrono::steady_clock::time_point{}) {}
  ~PhaseTimer() {
    if (profiler_)
      profiler_->add(
          phase_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  StepProfiler* profiler_;
  StepPhase phase_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace loom
