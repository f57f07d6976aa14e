// EngineWatchdog: decides whether the engine is stuck, from observations of
// its step counter. The engine is stalled when it has had work (running or
// waiting sequences) and its step count has not changed for longer than the
// window. Pure logic: time comes in as an argument. Not thread-safe (the
// server holds a lock around it).
#pragma once

#include <chrono>
#include <cstdint>

namespace loom::server {

class EngineWatchdog {
 public:
  using Clock = std::chrono::steady_clock;

  EngineWatchdog(Clock::duration window, Clock::time_point now)
      : window_(window), last_progress_(now) {}

  // One look at the engine: its step count and whether it has work. An idle
  // engine, a changed step count, or work seen for the first time since the
  // engine was idle count as progress.
  void observe(uint64_t steps, bool busy, Clock::time_point now);
  // Busy at the last observation and no progress for longer than the window.
  bool stalled(Clock::time_point now) const;
  Clock::duration since_progress(Clock::time_point now) const { return now - last_progress_; }
  Clock::duration window() const { return window_; }

 private:
  Clock::duration window_;
  Clock::time_point last_progress_;
  uint64_t last_steps_ = 0;
  bool busy_ = false;
};

}  // namespace loom::server
