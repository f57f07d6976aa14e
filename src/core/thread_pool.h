// ThreadPool: the one pool of worker threads that CPU kernels share.
// parallel_for splits [0, n) into contiguous chunks, a few per thread, and
// returns when every chunk is done. Each thread (the caller is thread 0) owns
// a lane: a contiguous run of chunks that it claims in order, so a kernel
// streaming its share of a weight reads one run of memory and can prefetch
// past the end of a chunk into its next one. A thread done with its lane
// claims what is left of the others' (a descheduled thread's work is taken
// over chunk by chunk). Idle workers spin briefly on the job word, then sleep
// on a condition variable, so back-to-back small jobs (a decode step issues
// hundreds) cost about a microsecond instead of a wake-up each. A worker that is slow to wake
// (a loaded machine) never delays a job: it only joins while chunks remain.
// One caller at a time runs in parallel; a nested call (from inside fn) or a
// call that overlaps another thread's job runs serially on its own thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace loom {

class ThreadPool {
 public:
  // num_threads: total threads including the caller. Workers are pinned one
  // per physical core (skipping the first, where the caller usually runs)
  // when the process may use at least num_threads cores and LOOM_POOL_PIN is
  // not 0; otherwise the OS places them.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();  // must not overlap a parallel_for
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // fn(begin, end) over chunks of [0, n); at least `grain` items per chunk
  // (except the last). Any thread may run any chunk. fn is only referenced
  // until parallel_for returns; the first exception it throws is rethrown here
  // after all chunks that started have finished (later chunks are skipped).
  template <class Fn>
  void parallel_for(int64_t n, Fn&& fn, int64_t grain = 1) {
    using F = std::remove_reference_t<Fn>;
    run(n, grain, const_cast<void*>(static_cast<const void*>(std::addressof(fn))),
        [](void* f, int64_t b, int64_t e) { (*static_cast<F*>(f))(b, e); });
  }

  // The process-wide pool; sized by set_global_threads() before first use
  // (default, and for 0: default_threads()).
  static ThreadPool& global();
  static void set_global_threads(int num_threads);
  // Physical cores this process may run on (its affinity mask, SMT siblings
  // counted once); hardware concurrency where the topology is not readable.
  // Compute-bound kernels gain nothing from a core's second hardware thread.
  static int default_threads();

 private:
  using Invoke = void (*)(void* fn, int64_t begin, int64_t end);

  void run(int64_t n, int64_t grain, void* fn, Invoke invoke);
  void worker_loop(int lane);
  uint64_t wait_for_job(uint32_t seen);
  void run_chunks(int lane);
  void leave_job();
  void wait_job_done();

  // job_state_: generation (bits 32..63) | closed (bit 31) | joined workers
  // (bits 0..30). A worker may join only an open job; the caller closes it
  // once no worker is joined and no chunk is left, after which the job fields
  // below belong to the caller again.
  static constexpr uint64_t kClosed = uint64_t{1} << 31;
  static constexpr uint64_t kJoinedMask = kClosed - 1;
  alignas(64) std::atomic<uint64_t> job_state_{kClosed};
  // Thread i's lane of the current job: chunks [lane_next_[i], lane_end_[i]),
  // claimed by fetch_add on lane_next_[i] (by any thread once its own lane is
  // done). The counters share cache lines: a small job then costs the caller
  // and the workers about one line's transfers, as a single counter would.
  std::unique_ptr<std::atomic<int64_t>[]> lane_next_;
  std::vector<int64_t> lane_end_;
  // The current job (written by the caller while the job is closed).
  void* fn_ = nullptr;
  Invoke invoke_ = nullptr;
  int64_t n_ = 0, chunk_ = 0;
  std::exception_ptr error_;  // guarded by mu_

  alignas(64) std::atomic<bool> busy_{false};  // a parallel job is running
  std::atomic<bool> stop_{false};
  std::atomic<int> sleeping_workers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::vector<std::thread> workers_;
};

}  // namespace loom
