// Incremental Server-Sent Events parser for streamed OpenAI responses: bytes
// arrive in arbitrary pieces (split mid-line, mid-CRLF); each complete event's
// data (its `data:` lines joined by '\n') is handed to a callback.
// Not thread-safe: one parser per response stream.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace loom::bench {

class SseParser {
 public:
  using OnEvent = std::function<void(std::string_view data)>;
  explicit SseParser(OnEvent on_event) : on_event_(std::move(on_event)) {}

  // Feeds the next bytes of the body. Events whose blank line has arrived are
  // delivered before feed returns.
  void feed(std::string_view bytes);
  // End of stream: delivers a last event that was not followed by a blank line.
  void finish();
  // Bytes held that do not yet form a complete line.
  size_t pending_bytes() const { return line_.size(); }

 private:
  void line(std::string_view l);
  void dispatch();

  OnEvent on_event_;
  std::string line_;  // partial line
  std::string data_;  // data of the event being built
  bool has_data_ = false;
  bool last_was_cr_ = false;  // a '\r' ended the previous piece: skip a following '\n'
};

}  // namespace loom::bench
