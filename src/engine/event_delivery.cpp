// EventDelivery: one delivery thread, batches in the order handed over.
#include "engine/event_delivery.h"

#include <chrono>

#include "core/logging.h"

namespace loom {

EventDelivery::~EventDelivery() { stop(); }

void EventDelivery::start() {
  std::lock_guard<std::mutex> lk(mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { loop(); });
}

void EventDelivery::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  thread_ = std::thread();
}

void EventDelivery::run_callbacks(std::vector<SequenceEvent>& events) {
  for (SequenceEvent& e : events) {
    if (!e.request || !e.request->callback) continue;
    try {
      e.request->callback(e.event);
    } catch (const std::exception& err) {  // a front end's bug must not take the engine down
      LOOM_LOG_ERROR("engine: a stream callback of request {} threw: {}", e.event.request_id, err.what());
    }
  }
}

void EventDelivery::deliver(std::vector<SequenceEvent> events) {
  if (events.empty()) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (thread_.joinable() && !stopping_) {
      queue_.push_back(std::move(events));
      cv_.notify_one();
      return;
    }
  }
  run_callbacks(events);
}

EventDelivery::CallbackTime EventDelivery::callback_time() const {
  return {timed_batches_.load(std::memory_order_relaxed),
          double(timed_ns_.load(std::memory_order_relaxed)) * 1e-9};
}

void EventDelivery::flush() {
  std::unique_lock<std::mutex> lk(mu_);
  idle_cv_.wait(lk, [&] { return (queue_.empty() && !busy_) || !thread_.joinable(); });
}

void EventDelivery::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) {
      idle_cv_.notify_all();
      return;  // stopping, and everything delivered
    }
    std::vector<SequenceEvent> batch = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lk.unlock();
    if (timed_.load(std::memory_order_relaxed)) {
      const auto start = std::chrono::steady_clock::now();
      run_callbacks(batch);
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::steady_clock::now() - start);
      timed_ns_.fetch_add(uint64_t(ns.count()), std::memory_order_relaxed);
      timed_batches_.fetch_add(1, std::memory_order_relaxed);
    } else {
      run_callbacks(batch);
    }
    batch.clear();  // release the requests' state off the lock
    lk.lock();
    busy_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

// ---------------------------------------------------------------- EventQueue

void EventQueue::push(StreamEvent e) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    q_.push_back(std::move(e));
  }
  cv_.notify_one();
}

StreamEvent EventQueue::pop() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return !q_.empty(); });
  StreamEvent e = std::move(q_.front());
  q_.pop_front();
  return e;
}

std::optional<StreamEvent> EventQueue::try_pop() {
  std::lock_guard<std::mutex> lk(mu_);
  if (q_.empty()) return std::nullopt;
  StreamEvent e = std::move(q_.front());
  q_.pop_front();
  return e;
}

}  // namespace loom
