// ThreadPool: the one pool of worker threads that CPU kernels share.
// parallel_for splits [0, n) into contiguous chunks, runs them on the workers
// and the calling thread, and returns when all are done. It is called from one
// thread at a time (the engine thread); nested calls run serially.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace loom {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);  // total threads including the caller
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // fn(begin, end) over chunks of [0, n); at least `grain` items per chunk.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

  // The process-wide pool; sized by set_global_threads() before first use
  // (default: hardware concurrency).
  static ThreadPool& global();
  static void set_global_threads(int num_threads);

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0, job_chunk_ = 0;
  int64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  bool busy_ = false;
};

}  // namespace loom
