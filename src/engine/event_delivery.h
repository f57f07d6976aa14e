// EventDelivery: runs requests' StreamCallbacks off the engine thread. The
// engine thread hands over each step's events in one batch and goes on; a
// delivery thread calls the callbacks in order (so a request's events keep
// their order, and formatting responses never delays the next step). Before
// start() and after stop() events are delivered on the caller's thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/scheduler.h"

namespace loom {

class EventDelivery {
 public:
  EventDelivery() = default;
  ~EventDelivery();  // stop()
  EventDelivery(const EventDelivery&) = delete;
  EventDelivery& operator=(const EventDelivery&) = delete;

  void start();
  // Delivers everything handed over so far, then ends the thread.
  void stop();
  // Engine thread: queues the events (started) or delivers them now.
  void deliver(std::vector<SequenceEvent> events);
  // Blocks until everything handed over so far has been delivered.
  void flush();
  // The step profile: time the delivery thread's callbacks (off by default).
  void set_timed(bool on) { timed_ = on; }
  // Batches delivered by the delivery thread and their callbacks' time,
  // while timed (any thread).
  struct CallbackTime {
    uint64_t batches = 0;
    double seconds = 0;
  };
  CallbackTime callback_time() const;

 private:
  static void run_callbacks(std::vector<SequenceEvent>& events);
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;       // work or stop
  std::condition_variable idle_cv_;  // queue drained
  std::deque<std::vector<SequenceEvent>> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  std::thread thread_;
  std::atomic<bool> timed_{false};
  std::atomic<uint64_t> timed_batches_{0};
  std::atomic<uint64_t> timed_ns_{0};
};

}  // namespace loom
