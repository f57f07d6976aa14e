// The HTTP exchange as the application sees it, free of Beast/Asio: a parsed
// request, a complete response, and a ResponseSink through which a handler
// answers (at once, or later from another thread, or as a chunked stream).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace loom::server {

struct HttpRequest {
  std::string method;                         // "GET", "POST", ...
  std::string target;                         // path and query
  std::map<std::string, std::string> headers; // names lower-cased
  std::string body;
  std::string remote;                         // peer address, for logs
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
  std::string path() const { return target.substr(0, target.find('?')); }
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HttpHeaders headers;  // extra headers (Retry-After, ...)
};

// One exchange's reply channel. Thread-safe; every call returns at once
// (bytes are queued on the connection). Exactly one of send() or
// begin_stream()..end_stream() per exchange; calls after the end or after the
// client went away are ignored.
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  virtual void send(HttpResponse response) = 0;
  // A chunked response (e.g. text/event-stream); write() sends one chunk.
  virtual void begin_stream(int status, std::string content_type, HttpHeaders headers) = 0;
  virtual void write(std::string chunk) = 0;
  virtual void end_stream() = 0;
  // Called once (on an I/O thread) when the client disconnects or the
  // connection is dropped before the exchange ended; immediately when that
  // already happened.
  virtual void on_close(std::function<void()> callback) = 0;
};

using RequestHandler = std::function<void(HttpRequest, std::shared_ptr<ResponseSink>)>;

}  // namespace loom::server
