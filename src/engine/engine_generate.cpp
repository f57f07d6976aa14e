// Engine::generate: submit a batch of requests and wait for all their results.
#include "core/error.h"
#include "engine/engine.h"

namespace loom {

std::vector<Result> Engine::generate(std::vector<Request> requests) {
  struct Collector {
    std::mutex mu;
    std::condition_variable cv;
    size_t remaining = 0;
  } col;
  std::vector<Result> results(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    Result& res = results[i];
    res.external_id = requests[i].external_id;
    res.prompt_tokens = int32_t(requests[i].prompt_ids.size());
    for (int32_t k = 0; k < std::max(1, requests[i].params.n); ++k)
    {
      SequenceResult sr;
      sr.index = k;
      res.sequences.push_back(std::move(sr));
    }
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    Result* res = &results[i];
    const bool want_logprobs = requests[i].params.logprobs.has_value();
    try {
      {
        std::lock_guard<std::mutex> lk(col.mu);
        ++col.remaining;
      }
      res->id = submit(std::move(requests[i]), [res, &col, want_logprobs](const StreamEvent& e) {
        std::lock_guard<std::mutex> lk(col.mu);
        if (e.error != EngineErrorKind::None && res->error == EngineErrorKind::None) {
          res->error = e.error;
          res->error_message = e.error_message;
        }
        if (size_t(e.seq_index) < res->sequences.size()) {
          SequenceResult& s = res->sequences[size_t(e.seq_index)];
          s.output_ids.insert(s.output_ids.end(), e.token_ids.begin(), e.token_ids.end());
          s.text += e.text;
          if (want_logprobs) s.logprobs.insert(s.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
          s.prompt_logprobs.insert(s.prompt_logprobs.end(), e.prompt_logprobs.begin(), e.prompt_logprobs.end());
          if (e.finish != FinishReason::None) s.finish_reason = e.finish;
        }
        if (e.request_done) {
          --col.remaining;
          col.cv.notify_all();
        }
      });
    } catch (const Error& err) {
      std::lock_guard<std::mutex> lk(col.mu);
      --col.remaining;
      res->error = EngineErrorKind::Invalid;
      res->error_message = err.what();
      for (auto& s : res->sequences) s.finish_reason = FinishReason::Error;
    }
  }
  if (running_thread_) {
    std::unique_lock<std::mutex> lk(col.mu);
    col.cv.wait(lk, [&] { return col.remaining == 0; });
  } else {
    for (;;) {
      {
        std::lock_guard<std::mutex> lk(col.mu);
        if (col.remaining == 0) break;
      }
      if (!run_step() && scheduler_->idle()) {
        std::lock_guard<std::mutex> lk(col.mu);
        LOOM_CHECK(col.remaining == 0, "engine idle with {} requests unfinished", col.remaining);
        break;
      }
    }
  }
  return results;
}

}  // namespace loom
