// Engine watchdog: progress = a step begun or ended, or nothing to do.
#include "server/engine_watchdog.h"

namespace loom::server {

void EngineWatchdog::observe(const Activity& activity, Clock::time_point now) {
  // Work first seen now starts the clock now: the engine cannot be late with
  // work it has not had for a whole window as far as we know.
  const bool new_step = activity.step_started && activity.step_started != last_step_started_;
  if (activity.steps != last_steps_ || new_step || !activity.busy || !busy_) last_progress_ = now;
  last_steps_ = activity.steps;
  last_step_started_ = activity.step_started;
  busy_ = activity.busy;
}

bool EngineWatchdog::stalled(Clock::time_point now) const {
  return busy_ && now - last_progress_ > window_;
}

}  // namespace loom::server
