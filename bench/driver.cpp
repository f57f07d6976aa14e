#include "driver.h"

#include <atomic>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace loom::bench {

RunResult run_all(Engine& engine, std::vector<Request> requests) {
  using clock = std::chrono::steady_clock;
  RunResult run;
  run.requests.resize(requests.size());
  run.stats_before = engine.stats();
  std::mutex mu;
  std::atomic<size_t> remaining{requests.size()};
  const auto t0 = clock::now();
  auto since = [&] { return std::chrono::duration<double>(clock::now() - t0).count(); };

  std::atomic<bool> done{false};
  std::thread monitor([&] {
    while (!done.load()) {
      const EngineStats s = engine.stats();
      run.peak_used_blocks = std::max(run.peak_used_blocks, s.kv.used_blocks);
      run.peak_kv_waste = std::max(run.peak_kv_waste, s.kv.kv_waste());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });

  for (size_t i = 0; i < requests.size(); ++i) {
    run.requests[i].prompt_tokens = static_cast<int32_t>(requests[i].prompt_ids.size());
    run.requests[i].submit_s = since();
    engine.submit(std::move(requests[i]), [&, i](const StreamEvent& e) {
      const double t = since();
      std::lock_guard<std::mutex> lock(mu);
      auto& r = run.requests[i];
      for (size_t k = 0; k < e.token_ids.size(); ++k) r.token_s.push_back(t);
      if (e.error != EngineErrorKind::None) r.error = true;
      if (e.request_done) remaining.fetch_sub(1);
    });
  }
  while (remaining.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  run.duration_s = since();
  done = true;
  monitor.join();
  run.stats_after = engine.stats();
  return run;
}

nlohmann::json latency_report(const RunResult& run) {
  std::vector<double> ttft, tpot, itl, e2e;
  for (const auto& r : run.requests) {
    if (r.error || r.token_s.empty()) continue;
    ttft.push_back((r.token_s.front() - r.submit_s) * 1e3);
    e2e.push_back((r.token_s.back() - r.submit_s) * 1e3);
    if (r.token_s.size() > 1) {
      tpot.push_back((r.token_s.back() - r.token_s.front()) * 1e3 / double(r.token_s.size() - 1));
      for (size_t k = 1; k < r.token_s.size(); ++k) itl.push_back((r.token_s[k] - r.token_s[k - 1]) * 1e3);
    }
  }
  return {{"ttft_ms", to_json(percentiles(ttft))},
          {"tpot_ms", to_json(percentiles(tpot))},
          {"itl_ms", to_json(percentiles(itl))},
          {"e2e_ms", to_json(percentiles(e2e))}};
}

}  // namespace loom::bench
