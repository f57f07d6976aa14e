// Engine watchdog: progress = a new step, or nothing to do.
#include "server/engine_watchdog.h"

namespace loom::server {

void EngineWatchdog::observe(uint64_t steps, bool busy, Clock::time_point now) {
  // Work first seen now starts the clock now: the engine cannot be late with
  // work it has not had for a whole window as far as we know.
  if (steps != last_steps_ || !busy || !busy_) {
    last_steps_ = steps;
    last_progress_ = now;
  }
  busy_ = busy;
}

bool EngineWatchdog::stalled(Clock::time_point now) const {
  return busy_ && now - last_progress_ > window_;
}

}  // namespace loom::server
