// StepProfiler: a loop turn's phases and marks filed into the StepProfile.
#include "engine/step_profiler.h"

#include <algorithm>

namespace loom {

StepProfiler::StepProfiler(Backend& backend) : backend_(backend) {
  profile_.enabled = true;
  profile_.device_clock = backend.marks_on_device();
}

void StepProfiler::begin_turn() {
  turn_start_ = Clock::now();
  turn_ = StepTimes{};
  kind_ = StepKind::Decode;
  replayed_ = false;
  start_.reset();
  end_.reset();
}

void StepProfiler::add(StepPhase phase, double seconds) {
  turn_.phase_s[size_t(phase)] += seconds;
}

void StepProfiler::mark_start() {
  start_ = backend_.mark_time();
}
void StepProfiler::mark_end() {
  end_ = backend_.mark_time();
}

void StepProfiler::end_turn() {
  turn_.steps = 1;
  turn_.wall_s = std::chrono::duration<double>(Clock::now() - turn_start_).count();
  if (start_ && end_) {
    profile_.at(kind_, replayed_) += turn_;
    pending_.push_back(Pending{kind_, replayed_, std::move(start_), std::move(end_)});
  } else {
    profile_.idle_turns += turn_;
  }
  start_.reset();
  end_.reset();
  resolve();
}

void StepProfiler::idle() {
  resolve();
  if (!pending_.empty()) {
    // The last marks trail the last tokens' copy in the stream by a few
    // microseconds; with no work queued, waiting for them costs nothing.
    backend_.synchronize();
    resolve();
  }
  last_end_.reset();
}

void StepProfiler::resolve() {
  while (!pending_.empty()) {
    Pending& p = pending_.front();
    const std::optional<double> span = backend_.seconds_between(*p.start, *p.end);
    if (!span) return;  // the device has not got there yet; later steps are behind it
    StepTimes& t = profile_.at(p.kind, p.replayed);
    t.device_steps++;
    t.device_span_s += std::max(0.0, *span);
    if (last_end_)
      if (const std::optional<double> gap = backend_.seconds_between(*last_end_, *p.start)) {
        t.device_gaps++;
        t.device_gap_s += std::max(0.0, *gap);
      }
    last_end_ = std::move(p.end);
    pending_.pop_front();
  }
}

}  // namespace loom
