// ThreadPool: spin-then-sleep workers and atomic chunk claiming (see the header).
// Synchronisation, in short:
//  * The caller writes the job fields while the job is closed, then publishes
//    them with a seq_cst store of a new open generation to job_state_. A worker
//    reads them only after a successful CAS that joins that same open
//    generation, so it reads what that store published.
//  * The caller closes a job only by a CAS from "open, 0 joined", so no worker
//    is inside it; each worker leaves with a RMW after its last chunk, so the
//    close CAS sees (happens after) everything the workers wrote.
//  * Sleeping: a worker announces itself in sleeping_workers_ under mu_ and
//    re-checks job_state_ before waiting; the caller stores job_state_ before
//    reading sleeping_workers_. All are seq_cst, so either the caller sees the
//    sleeper and notifies under mu_, or the sleeper sees the new job. The
//    caller's own sleep on completion mirrors this with caller_sleeping_.
#include "core/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <utility>

namespace loom {

namespace {

int g_requested_threads = 0;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How long idle threads spin before sleeping: long enough to bridge the gap
// between two ops of a decode step, short enough not to burn a core when idle.
// LOOM_POOL_SPIN_US overrides it (0: always sleep).
std::chrono::nanoseconds spin_budget() {
  static const std::chrono::nanoseconds budget = [] {
    long us = 50;
    if (const char* s = std::getenv("LOOM_POOL_SPIN_US"))
      us = std::max(0L, std::strtol(s, nullptr, 10));
    return std::chrono::nanoseconds(us * 1000);
  }();
  return budget;
}

// Spins until done() or the budget runs out; true when done() held.
template <class Done>
bool spin_until(Done&& done) {
  const auto budget = spin_budget();
  if (budget.count() == 0) return done();
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() - start > budget) return done();
  }
}

constexpr uint32_t generation_of(uint64_t s) {
  return static_cast<uint32_t>(s >> 32);
}

// One logical CPU per physical core this process may use, in CPU order (the
// first CPU of each core). Empty when the topology cannot be read.
std::vector<int> one_cpu_per_core() {
  std::vector<int> cpus;
#ifdef __linux__
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) return cpus;
  std::set<std::pair<int, int>> seen;  // (package, core)
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &mask)) continue;
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::ifstream core_f(dir + "core_id"), pkg_f(dir + "physical_package_id");
    int core = -1, pkg = -1;
    if (!(core_f >> core) || !(pkg_f >> pkg)) return {};
    if (seen.insert({pkg, core}).second) cpus.push_back(cpu);
  }
#endif
  return cpus;
}

bool pinning_enabled() {
  const char* env = std::getenv("LOOM_POOL_PIN");
  return !(env && std::string(env) == "0");
}

void pin_current_thread(int cpu) {
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set,
                         &set);  // best effort: a refusal leaves it unpinned
#endif
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  num_threads = std::max(1, num_threads);
  workers_.reserve(static_cast<size_t>(num_threads - 1));
  std::vector<int> cores;
  if (num_threads > 1 && pinning_enabled()) cores = one_cpu_per_core();
  const bool pin = static_cast<int>(cores.size()) >= num_threads;
  lane_next_ = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(num_threads));
  lane_end_.assign(static_cast<size_t>(num_threads), 0);
  for (int i = 1; i < num_threads; ++i)
    workers_.emplace_back([this, i, cpu = pin ? cores[static_cast<size_t>(i)] : -1] {
      if (cpu >= 0) pin_current_thread(cpu);
      worker_loop(i);
    });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

uint64_t ThreadPool::wait_for_job(uint32_t seen) {
  uint64_t s = 0;
  auto ready = [&] {
    s = job_state_.load();
    return generation_of(s) != seen || stop_.load(std::memory_order_relaxed);
  };
  if (spin_until(ready)) return s;
  std::unique_lock<std::mutex> lock(mu_);
  sleeping_workers_.fetch_add(1);
  work_cv_.wait(lock, [&] { return ready() || stop_.load(); });
  sleeping_workers_.fetch_sub(1);
  return s;
}

void ThreadPool::worker_loop(int lane) {
  uint32_t seen = 0;
  for (;;) {
    uint64_t s = wait_for_job(seen);
    if (stop_.load()) return;
    seen = generation_of(s);
    // Join only while this generation is open; a failed CAS reloads s.
    while (!(s & kClosed) && generation_of(s) == seen) {
      if (job_state_.compare_exchange_weak(s, s + 1)) {
        run_chunks(lane);
        leave_job();
        break;
      }
    }
  }
}

void ThreadPool::run_chunks(int lane) {
  const int lanes = num_threads();
  // Its own lane first, in order; then what is left of the others'.
  for (int j = 0; j < lanes; ++j) {
    const auto l = static_cast<size_t>((lane + j) % lanes);
    for (;;) {
      const int64_t c = lane_next_[l].fetch_add(1, std::memory_order_relaxed);
      if (c >= lane_end_[l]) break;
      const int64_t b = c * chunk_;
      try {
        invoke_(fn_, b, std::min(n_, b + chunk_));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
        for (size_t k = 0; k < lane_end_.size(); ++k)  // skip the rest
          lane_next_[k].store(lane_end_[k], std::memory_order_relaxed);
      }
    }
  }
}

void ThreadPool::leave_job() {
  const uint64_t prev = job_state_.fetch_sub(1);
  if ((prev & kJoinedMask) == 1 && caller_sleeping_.load()) {
    { std::lock_guard<std::mutex> lock(mu_); }
    done_cv_.notify_one();
  }
}

void ThreadPool::wait_job_done() {
  // Every chunk has been claimed (the caller's run_chunks returned); close the
  // job as soon as no worker is inside it.
  auto try_close = [&] {
    uint64_t s = job_state_.load();
    return (s & kJoinedMask) == 0 && job_state_.compare_exchange_strong(s, s | kClosed);
  };
  if (spin_until(try_close)) return;
  std::unique_lock<std::mutex> lock(mu_);
  caller_sleeping_.store(true);
  done_cv_.wait(lock, try_close);
  caller_sleeping_.store(false);
}

void ThreadPool::run(int64_t n, int64_t grain, void* fn, Invoke invoke) {
  if (n <= 0) return;
  const int64_t threads = num_threads();
  grain = std::max<int64_t>(1, grain);
  // A few chunks per thread, so a thread that is descheduled mid-job leaves
  // less behind for the others.
  const int64_t chunk = std::max(grain, (n + 4 * threads - 1) / (4 * threads));
  if (threads == 1 || n <= chunk || busy_.exchange(true, std::memory_order_acquire)) {
    invoke(fn, 0, n);
    return;
  }
  fn_ = fn;
  invoke_ = invoke;
  n_ = n;
  chunk_ = chunk;
  const int64_t num_chunks = (n + chunk - 1) / chunk;
  for (int64_t i = 0; i < threads; ++i) {
    lane_next_[static_cast<size_t>(i)].store(num_chunks * i / threads, std::memory_order_relaxed);
    lane_end_[static_cast<size_t>(i)] = num_chunks * (i + 1) / threads;
  }
  const uint64_t next_generation = (job_state_.load() >> 32) + 1;
  job_state_.store(next_generation << 32);  // open, nobody joined
  if (sleeping_workers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    work_cv_.notify_all();
  }
  run_chunks(0);
  wait_job_done();
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::swap(error, error_);
  }
  fn_ = nullptr;
  busy_.store(false, std::memory_order_release);
  if (error) std::rethrow_exception(error);
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(g_requested_threads > 0 ? g_requested_threads : default_threads());
  return pool;
}

int ThreadPool::default_threads() {
  static const int n = [] {
    const auto cores = one_cpu_per_core();
    return cores.empty() ? static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))
                         : static_cast<int>(cores.size());
  }();
  return n;
}

void ThreadPool::set_global_threads(int num_threads) {
  g_requested_threads = num_threads;
}

}  // namespace loom
