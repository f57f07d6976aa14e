// ThreadPool (core/thread_pool.h), the pool every CPU op runs on: each index
// runs exactly once, for many tiny jobs in a row (the spin path), after idle
// gaps (the sleep path), nested and concurrent calls (serialised), exceptions,
// and construction/destruction while idle. Timing is printed by
// test_perf_matmul's DISABLED_ParallelForOverhead, not asserted here.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <map>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace loom {
namespace {

// Runs parallel_for(n) and checks every index was visited exactly once.
void expect_covers_once(ThreadPool& pool, int64_t n, int64_t grain = 1) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  pool.parallel_for(
      n,
      [&](int64_t b, int64_t e) {
        ASSERT_LE(0, b);
        ASSERT_LT(b, e);
        ASSERT_LE(e, n);
        for (int64_t i = b; i < e; ++i)
          hits[static_cast<size_t>(i)].fetch_add(1, std::memory_order_relaxed);
      },
      grain);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "index " << i << " of " << n;
}

TEST(ThreadPool, CoversRangesOfEverySize) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 8, 9, 31, 64, 1000, 100003}) {
      SCOPED_TRACE(::testing::Message() << threads << " threads, n " << n);
      expect_covers_once(pool, n);
      expect_covers_once(pool, n, 7);
    }
  }
}

TEST(ThreadPool, AThreadTakesItsChunksInOrderAndAStalledThreadsAreTakenOver) {
  // Each thread sees its chunks in increasing order within runs (its own lane
  // first); when one thread stalls in its first chunk, the others finish
  // every other chunk, its lane's included, before it returns.
  ThreadPool pool(4);
  const int64_t n = 4000;
  std::mutex mu;
  std::map<std::thread::id, std::vector<int64_t>> seen;
  std::atomic<int> stalled{0};
  std::atomic<int64_t> done{0};
  std::atomic<bool> release{false};
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    {
      std::lock_guard<std::mutex> lock(mu);
      seen[std::this_thread::get_id()].push_back(b);
    }
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
    if (b > 0 && stalled.exchange(1) == 0) {
      // This thread waits until every other chunk is done (or 5 s pass).
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (!release.load() && std::chrono::steady_clock::now() < until) {
        // Everything but this chunk done: its lane's later chunks too.
        if (done.load() >= n - (e - b)) release.store(true);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      return;
    }
    done.fetch_add(e - b);
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
  EXPECT_TRUE(release.load()) << "the other threads did not take over the stalled thread's lane";
  for (const auto& [id, starts] : seen) {
    // Starts ascend except where a thread moves on to another lane (at most
    // once per other lane).
    int descents = 0;
    for (size_t i = 1; i < starts.size(); ++i) descents += starts[i] < starts[i - 1];
    EXPECT_LE(descents, pool.num_threads() - 1);
  }
}

TEST(ThreadPool, ManyTinyJobsInARow) {
  ThreadPool pool(4);
  std::atomic<int64_t> total{0};
  int64_t want = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    const int64_t n = 1 + iter % 37;
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      int64_t s = 0;
      for (int64_t i = b; i < e; ++i) s += i + 1;
      total.fetch_add(s, std::memory_order_relaxed);
    });
    want += n * (n + 1) / 2;
  }
  EXPECT_EQ(total.load(), want);
}

TEST(ThreadPool, WritesOfWorkersAreVisibleAfterReturn) {
  ThreadPool pool(3);
  std::vector<int64_t> out(4096);  // plain memory: parallel_for must publish it
  for (int iter = 0; iter < 2000; ++iter) {
    pool.parallel_for(static_cast<int64_t>(out.size()), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[static_cast<size_t>(i)] = i * iter;
    });
    for (size_t i = 0; i < out.size(); i += 511) ASSERT_EQ(out[i], static_cast<int64_t>(i) * iter);
  }
}

TEST(ThreadPool, JobsAfterIdleGapsWakeSleepingWorkers) {
  ThreadPool pool(3);
  for (int iter = 0; iter < 5; ++iter) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // well past the spin budget
    std::vector<std::atomic<int>> seen_by(64);
    std::atomic<int> calls{0};
    pool.parallel_for(64, [&](int64_t b, int64_t e) {
      calls.fetch_add(1);
      for (int64_t i = b; i < e; ++i) seen_by[static_cast<size_t>(i)].fetch_add(1);
    });
    for (auto& s : seen_by) ASSERT_EQ(s.load(), 1);
    EXPECT_GT(calls.load(), 1);  // split into chunks even if one thread ran them all
  }
}

TEST(ThreadPool, NestedCallsRunSerially) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(64 * 50);
  pool.parallel_for(64, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const std::thread::id outer = std::this_thread::get_id();
      pool.parallel_for(50, [&](int64_t b2, int64_t e2) {
        EXPECT_EQ(std::this_thread::get_id(), outer);
        for (int64_t j = b2; j < e2; ++j) hits[static_cast<size_t>(i * 50 + j)].fetch_add(1);
      });
    }
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ThreadPool, ConcurrentCallersAreBothCorrect) {
  ThreadPool pool(4);
  auto caller = [&](int64_t n) {
    for (int iter = 0; iter < 500; ++iter) expect_covers_once(pool, n + iter % 5);
  };
  std::thread a(caller, 100), b(caller, 333);
  caller(57);
  a.join();
  b.join();
}

TEST(ThreadPool, ExceptionsReachTheCallerAndThePoolStaysUsable) {
  ThreadPool pool(4);
  for (int64_t bad : {0, 500, 999}) {
    std::atomic<int> ran{0};
    EXPECT_THROW(pool.parallel_for(1000,
                                   [&](int64_t b, int64_t e) {
                                     ran.fetch_add(1);
                                     if (b <= bad && bad < e) throw std::runtime_error("bad index");
                                   }),
                 std::runtime_error);
    EXPECT_GE(ran.load(), 1);
    expect_covers_once(pool, 1000);
  }
}

TEST(ThreadPool, ConstructAndDestroyWhileIdle) {
  for (int iter = 0; iter < 200; ++iter) {
    ThreadPool pool(1 + iter % 4);  // destroyed at once: workers may not have started
  }
  for (int iter = 0; iter < 20; ++iter) {
    ThreadPool pool(3);
    expect_covers_once(pool, 100);
    if (iter % 2) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // workers asleep
  }
}

TEST(ThreadPool, DefaultThreadsArePhysicalCoresWithinHardwareThreads) {
  const int n = ThreadPool::default_threads();
  EXPECT_GE(n, 1);
  EXPECT_LE(n, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

}  // namespace
}  // namespace loom
