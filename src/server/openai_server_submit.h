// OpenAiServer::submit_all (openai_server.h): shared by the generation and
// embeddings routes. Internal to src/server.
#pragma once

#include "server/api_error.h"
#include "server/openai_server.h"

namespace loom::server {

template <class CallT, class Make>
void OpenAiServer::submit_all(const std::shared_ptr<CallT>& call, const std::shared_ptr<ResponseSink>& sink,
                              size_t n, const Make& make, const char* param) {
  {
    std::lock_guard<std::mutex> lk(calls_mu_);
    calls_.insert(call);
    metrics_.set("loom_http_requests_in_flight", double(calls_.size()));
  }
  sink->on_close([weak = std::weak_ptr<CallT>(call)] {
    if (auto c = weak.lock()) c->abort(Exchange::AbortReason::ClientGone);
  });
  for (size_t i = 0; i < n; ++i) {
    {
      std::lock_guard<std::mutex> lk(call->mu);
      if (call->error) break;  // a request already failed: the answer is that error
    }
    RequestId eid = 0;
    try {
      eid = service_.submit(make(i), [call, i](const StreamEvent& e) { call->on_event(i, e); });
    } catch (const std::exception& e) {
      std::unique_lock<std::mutex> lk(call->mu);
      if (!call->error) call->error = ApiError(400, e.what(), param);
      for (RequestId other : call->engine_ids)
        if (other != 0) service_.abort(other);
      break;
    }
    std::lock_guard<std::mutex> lk(call->mu);
    call->engine_ids[i] = eid;
    ++call->submitted;
    if (call->aborted) service_.abort(eid);
  }
  std::unique_lock<std::mutex> lk(call->mu);
  call->all_submitted = true;
  call->maybe_finish(lk);
}

}  // namespace loom::server
