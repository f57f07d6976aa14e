// POST /v1/embeddings in OpenAiServer: admission (filter, tenant limits,
// drain), one engine pooling request per input, and the answer once every
// input's vector is back (or the first error); metrics and one access-log
// line, as for generation requests.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "server/api_error.h"
#include "server/embeddings_api.h"
#include "server/json_body.h"
#include "server/openai_server.h"
#include "server/openai_server_submit.h"
#include "tokenizer/tokenizer.h"

namespace loom::server {

using SteadyClock = std::chrono::steady_clock;

struct OpenAiServer::EmbeddingCall : OpenAiServer::Exchange {
  OpenAiServer& server;
  std::shared_ptr<ResponseSink> sink;
  EmbeddingRequest request;
  const Tenant* tenant;
  std::string id;
  std::string remote;
  SteadyClock::time_point arrived;

  std::mutex mu;
  std::vector<RequestId> engine_ids;  // by input; 0 until submitted
  std::vector<std::vector<float>> vectors;
  size_t submitted = 0;
  size_t done = 0;
  bool all_submitted = false;
  bool aborted = false;
  bool finished = false;
  bool queue_time_recorded = false;
  std::optional<ApiError> error;

  EmbeddingCall(OpenAiServer& s, std::shared_ptr<ResponseSink> k, EmbeddingRequest r,
                const Tenant* t, std::string id_, std::string remote_,
                SteadyClock::time_point arrived_)
      : server(s),
        sink(std::move(k)),
        request(std::move(r)),
        tenant(t),
        id(std::move(id_)),
        remote(std::move(remote_)),
        arrived(arrived_) {
    engine_ids.assign(request.inputs.size(), 0);
    vectors.resize(request.inputs.size());
  }

  // Engine delivery thread.
  void on_event(size_t input, const StreamEvent& e) {
    std::unique_lock<std::mutex> lk(mu);
    if (e.error != EngineErrorKind::None && !error) {
      error = engine_error(e);
      for (size_t i = 0; i < engine_ids.size(); ++i)  // the others cannot succeed now
        if (i != input && engine_ids[i] != 0) server.service_.abort(engine_ids[i]);
    }
    if (e.first_scheduled && !queue_time_recorded) {
      queue_time_recorded = true;
      server.metrics_.observe(
          "loom_request_queue_time_seconds",
          std::max(0.0, std::chrono::duration<double>(*e.first_scheduled - arrived).count()));
    }
    if (!e.embedding.empty()) vectors[input] = e.embedding;
    if (e.request_done) ++done;
    maybe_finish(lk);
  }

  static ApiError engine_error(const StreamEvent& e) {
    switch (e.error) {
      case EngineErrorKind::QueueFull:
        return ApiError(503, "the server is at capacity: " + e.error_message, "",
                        "service_unavailable")
            .with_retry_after(1);
      case EngineErrorKind::Shutdown:
        return ApiError(503, "the server is shutting down", "", "service_unavailable")
            .with_retry_after(1);
      case EngineErrorKind::TooLong:
        return ApiError(400, "an input does not fit the model's context or the KV cache", "input");
      case EngineErrorKind::Invalid:
        return ApiError(400, e.error_message, "input");
      default:
        return ApiError(500, e.error_message.empty() ? "internal error" : e.error_message, "",
                        "server_error");
    }
  }

  void abort(AbortReason) override {
    std::lock_guard<std::mutex> lk(mu);
    if (aborted || finished) return;
    aborted = true;
    for (RequestId rid : engine_ids)
      if (rid != 0) server.service_.abort(rid);
  }

  // mu held. Answers once every submitted input is done.
  void maybe_finish(std::unique_lock<std::mutex>& lk) {
    if (finished || !all_submitted || done < submitted) return;
    finished = true;
    if (tenant) server.limiter_.release(*tenant, 0);
    int status = 200;
    if (!error && aborted)
      error = ApiError(503, "the request was aborted", "", "service_unavailable");
    if (!error && submitted < request.inputs.size())
      error = ApiError(500, "internal error", "", "server_error");
    if (error) {
      status = error->status();
      HttpResponse r{status, "application/json", error_body(*error), {}};
      if (error->retry_after() > 0)
        r.headers.emplace_back("Retry-After", std::to_string(error->retry_after()));
      sink->send(std::move(r));
    } else {
      sink->send(
          HttpResponse{200, "application/json", embedding_response_body(request, vectors), {}});
    }
    if (aborted) status = 499;  // client closed the request, or shutdown
    lk.unlock();
    record(status);
    server.finished(this);
  }

  void record(int status) {
    Metrics& m = server.metrics_;
    const std::string st = std::to_string(status);
    const std::string tenant_name = tenant ? tenant->name : "";
    const auto tokens = double(request.prompt_tokens());
    m.inc("loom_requests_total", {{"route", "/v1/embeddings"}, {"status", st}});
    m.inc("loom_tenant_requests_total", {{"tenant", tenant_name}, {"status", st}});
    if (status == 200) {
      m.inc("loom_prompt_tokens_total", {}, tokens);
      m.inc("loom_tenant_tokens_total", {{"tenant", tenant_name}, {"kind", "prompt"}}, tokens);
    }
    const double e2e = std::chrono::duration<double>(SteadyClock::now() - arrived).count();
    if (status == 200) m.observe("loom_e2e_request_latency_seconds", e2e);
    if (!server.config_.log_requests) return;
    spdlog::info(
        "access id={} tenant={} route=/v1/embeddings status={} inputs={} prompt_tokens={} "
        "e2e_ms={:.1f} "
        "remote={}",
        id, tenant_name.empty() ? "-" : tenant_name, status, request.inputs.size(),
        request.prompt_tokens(), e2e * 1e3, remote.empty() ? "-" : remote);
  }
};

void OpenAiServer::start_embeddings(const HttpRequest& req,
                                    const std::shared_ptr<ResponseSink>& sink,
                                    const Tenant* tenant) {
  const auto arrived = SteadyClock::now();
  const auto& lim = config_.limits;
  EmbeddingRequest r = parse_embedding_request(parse_body(req), model_, lim);
  for (const auto& ids : r.inputs) {
    if (tenant && tenant->limits.max_prompt_tokens > 0 &&
        int64_t(ids.size()) > tenant->limits.max_prompt_tokens) {
      metrics_.inc("loom_filtered_requests_total", {{"rule", "max_prompt_tokens"}});
      throw ApiError(400,
                     fmt::format("an input has {} tokens; tenant '{}' is limited to {}", ids.size(),
                                 tenant->name, tenant->limits.max_prompt_tokens),
                     "input");
    }
  }
  if (filter_.size() > 0)  // rules see the inputs' text (token ids decoded)
    for (const auto& ids : r.inputs)
      if (auto rule = filter_.check(model_.tokenizer->decode(ids, false))) {
        metrics_.inc("loom_filtered_requests_total", {{"rule", *rule}});
        throw ApiError(
            400, fmt::format("the request was denied by the content filter (rule '{}')", *rule),
            "input");
      }
  if (draining_)
    throw ApiError(503, "the server is shutting down", "", "service_unavailable")
        .with_retry_after(config_.retry_after_seconds);
  if (tenant) {
    const RateLimitDecision d = limiter_.try_admit(*tenant, r.prompt_tokens());
    if (!d.admitted) {
      metrics_.inc("loom_rate_limited_requests_total",
                   {{"tenant", tenant->name}, {"reason", d.reason}});
      throw ApiError(429, fmt::format("tenant '{}' is over its {} limit", tenant->name, d.reason),
                     "", "rate_limit_error")
          .with_retry_after(d.retry_after_seconds);
    }
  }
  const std::string id = fmt::format("embd-{}{:x}", id_prefix_, next_id_++);
  auto call =
      std::make_shared<EmbeddingCall>(*this, sink, std::move(r), tenant, id, req.remote, arrived);
  const EmbeddingRequest& er = call->request;
  submit_all(
      call, sink, er.inputs.size(),
      [&](size_t i) {
        Request q;
        q.external_id = id;
        q.prompt_ids = er.inputs[i];
        q.pooling = PoolingParams{model_.pooling, er.normalize};
        q.priority = er.priority;
        q.cache_salt = tenant ? tenant->name : "";
        q.tenant = tenant ? tenant->name : "";
        q.tenant_weight = tenant ? tenant->weight : 1.0f;
        return q;
      },
      "input");
}

}  // namespace loom::server
