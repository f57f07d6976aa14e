// Minimal HTTP/1.1 client (Boost.Beast; plain http:// only), used by the
// serving benchmark (`loom bench serve`). StreamingHttpClient runs many requests at once on one
// io_context (no thread per request), hands body bytes over as they arrive
// and keeps idle keep-alive connections for reuse. http_request is a blocking
// call for the few side requests (/metrics, /tokenize, /v1/models).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "net/url.h"

namespace boost::asio {
class io_context;
}

namespace loom::net {

struct HttpResult {
  int status = 0;  // 0: no response (see error)
  std::string body;
  std::string error;  // transport error, "" when a response arrived
};
HttpResult http_request(const Url& url, const std::string& method, const std::string& path,
                        const std::string& body, double timeout_s,
                        const std::vector<std::pair<std::string, std::string>>& headers = {});

class StreamingHttpClient {
 public:
  struct Handlers {
    std::function<void(int status)> on_status;              // once, when the header arrived
    std::function<void(std::string_view)> on_body;          // each piece of the (de-chunked) body
    std::function<void(const std::string& error)> on_done;  // once; error "" on success
  };
  // Resolves the host now (throws loom::Error if it cannot). `timeout_s`
  // bounds each wait for the server (connect, write, every read).
  StreamingHttpClient(boost::asio::io_context& io, const Url& url, double timeout_s);
  ~StreamingHttpClient();
  StreamingHttpClient(const StreamingHttpClient&) = delete;
  StreamingHttpClient& operator=(const StreamingHttpClient&) = delete;

  // POSTs a JSON body to base_path + path. Handlers run on the io_context's
  // thread. Call from that thread (or before run()).
  void post(const std::string& path, std::string body, Handlers handlers);

  using Headers = std::vector<std::pair<std::string, std::string>>;
  // Any method (a body and Content-Type: application/json unless GET), with
  // extra headers. Returns a function that cancels the request: its
  // connection is closed (a client that goes away) and on_done reports
  // "cancelled", unless it already ran. Call both on the io_context's thread.
  std::function<void()> send(const std::string& method, const std::string& path,
                             std::string body, const Headers& headers, Handlers handlers);

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace loom::net
