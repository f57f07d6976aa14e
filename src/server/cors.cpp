// The CORS wrapper: answers preflights and adds Access-Control-Allow-Origin
// to responses (plain or streamed) through a decorating ResponseSink.
#include "server/cors.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "server/api_error.h"

namespace loom::server {

namespace {

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// The headers every response to an allowed origin carries.
HttpHeaders origin_headers(const CorsConfig& c, const std::string& origin) {
  const bool any =
      std::find(c.allowed_origins.begin(), c.allowed_origins.end(), "*") != c.allowed_origins.end();
  // "*" cannot go with credentials: echo the origin then.
  HttpHeaders h{{"Access-Control-Allow-Origin", any && !c.allow_credentials ? "*" : origin},
                {"Vary", "Origin"}};
  if (c.allow_credentials) h.emplace_back("Access-Control-Allow-Credentials", "true");
  return h;
}

class CorsSink : public ResponseSink {
 public:
  CorsSink(std::shared_ptr<ResponseSink> inner, HttpHeaders extra)
      : inner_(std::move(inner)), extra_(std::move(extra)) {}
  void send(HttpResponse r) override {
    r.headers.insert(r.headers.end(), extra_.begin(), extra_.end());
    inner_->send(std::move(r));
  }
  void begin_stream(int status, std::string content_type, HttpHeaders headers) override {
    headers.insert(headers.end(), extra_.begin(), extra_.end());
    inner_->begin_stream(status, std::move(content_type), std::move(headers));
  }
  void write(std::string chunk) override { inner_->write(std::move(chunk)); }
  void end_stream() override { inner_->end_stream(); }
  void on_close(std::function<void()> callback) override { inner_->on_close(std::move(callback)); }

 private:
  std::shared_ptr<ResponseSink> inner_;
  HttpHeaders extra_;
};

}  // namespace

bool cors_allows(const CorsConfig& config, const std::string& origin) {
  if (origin.empty()) return false;
  for (const auto& o : config.allowed_origins)
    if (o == "*" || o == origin) return true;
  return false;
}

RequestHandler with_cors(CorsConfig config, RequestHandler inner) {
  if (config.allowed_origins.empty()) return inner;
  return [config = std::move(config), inner = std::move(inner)](
             HttpRequest req, std::shared_ptr<ResponseSink> sink) {
    const std::string origin = req.header("origin");
    const bool allowed = cors_allows(config, origin);
    if (req.method == "OPTIONS" && !req.header("access-control-request-method").empty()) {
      if (!allowed) {
        const ApiError e(
            403,
            fmt::format("origin '{}' is not allowed (--allowed-origins)", origin.substr(0, 200)),
            "", "permission_error");
        sink->send({403, "application/json", error_body(e), {}});
        return;
      }
      HttpResponse r{204, "text/plain", "", origin_headers(config, origin)};
      r.headers.emplace_back("Access-Control-Allow-Methods", join(config.allowed_methods));
      r.headers.emplace_back("Access-Control-Allow-Headers", join(config.allowed_headers));
      r.headers.emplace_back("Access-Control-Max-Age", std::to_string(config.max_age_seconds));
      sink->send(std::move(r));
      return;
    }
    if (allowed) sink = std::make_shared<CorsSink>(std::move(sink), origin_headers(config, origin));
    inner(std::move(req), std::move(sink));
  };
}

}  // namespace loom::server
