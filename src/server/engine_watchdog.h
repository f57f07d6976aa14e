// EngineWatchdog: decides whether the engine is stuck, from looks at its
// activity. The engine is stalled when it has had work and no step has begun
// or ended for longer than the window. Work is running or waiting sequences,
// a step in progress, or generation requests the server submitted that have
// not finished: the last one sees work that arrived while the engine was
// idle even when the engine publishes nothing until its first step ends.
// Pure logic: time comes in as an argument. Not thread-safe (the server
// holds a lock around it).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace loom::server {

class EngineWatchdog {
 public:
  using Clock = std::chrono::steady_clock;

  // One look at the engine.
  struct Activity {
    uint64_t steps = 0;  // steps ended so far
    bool busy = false;   // has work (see above)
    // The start of the step in progress (an identity: a new value is a new
    // step; compared with nothing else, so the engine's clock may differ
    // from the one passed in as `now`).
    std::optional<Clock::time_point> step_started;
  };

  EngineWatchdog(Clock::duration window, Clock::time_point now)
      : window_(window), last_progress_(now) {}

  // An idle engine, a step that ended or began, or work seen for the first
  // time since the engine was idle count as progress at `now`.
  void observe(const Activity& activity, Clock::time_point now);
  // Busy at the last look and no progress for longer than the window.
  bool stalled(Clock::time_point now) const;
  Clock::duration since_progress(Clock::time_point now) const { return now - last_progress_; }
  Clock::duration window() const { return window_; }

 private:
  Clock::duration window_;
  Clock::time_point last_progress_;
  uint64_t last_steps_ = 0;
  std::optional<Clock::time_point> last_step_started_;
  bool busy_ = false;
};

}  // namespace loom::server
