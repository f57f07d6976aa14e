#include "core/thread_pool.h"

#include <algorithm>
#include <memory>

namespace loom {

namespace {
int g_requested_threads = 0;
}

ThreadPool::ThreadPool(int num_threads) {
  num_threads = std::max(1, num_threads);
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  int64_t seen = 0;
  for (;;) {
    std::unique_lock<std::mutex> lock(mu_);
    work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const auto* job = job_;
    const int64_t n = job_n_, chunk = job_chunk_;
    lock.unlock();
    const int64_t begin = index * chunk;
    if (begin < n) (*job)(begin, std::min(n, begin + chunk));
    lock.lock();
    if (--pending_ == 0) done_cv_.notify_one();
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t grain) {
  if (n <= 0) return;
  const int64_t threads = num_threads();
  grain = std::max<int64_t>(1, grain);
  if (threads == 1 || n <= grain || busy_) {
    fn(0, n);
    return;
  }
  const int64_t chunk = std::max(grain, (n + threads - 1) / threads);
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = true;
    job_ = &fn;
    job_n_ = n;
    job_chunk_ = chunk;
    pending_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  work_cv_.notify_all();
  fn(0, std::min(n, chunk));
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  busy_ = false;
  job_ = nullptr;
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(g_requested_threads > 0
                             ? g_requested_threads
                             : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  return pool;
}

void ThreadPool::set_global_threads(int num_threads) { g_requested_threads = num_threads; }

}  // namespace loom
