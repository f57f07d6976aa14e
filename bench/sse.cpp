#include "sse.h"

namespace loom::bench {

void SseParser::feed(std::string_view bytes) {
  for (char c : bytes) {
    if (last_was_cr_) {
      last_was_cr_ = false;
      if (c == '\n') continue;  // CRLF: the CR already ended the line
    }
    if (c == '\r' || c == '\n') {
      last_was_cr_ = (c == '\r');
      line(line_);
      line_.clear();
    } else {
      line_ += c;
    }
  }
}

void SseParser::finish() {
  if (!line_.empty()) {
    line(line_);
    line_.clear();
  }
  dispatch();
}

void SseParser::line(std::string_view l) {
  if (l.empty()) {
    dispatch();
    return;
  }
  if (l.front() == ':') return;  // comment / keep-alive
  const size_t colon = l.find(':');
  const std::string_view field = l.substr(0, colon);
  std::string_view value =
      colon == std::string_view::npos ? std::string_view{} : l.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field != "data") return;  // event, id, retry: not used by OpenAI streams
  if (has_data_) data_ += '\n';
  data_.append(value);
  has_data_ = true;
}

void SseParser::dispatch() {
  if (!has_data_) return;
  has_data_ = false;
  std::string data = std::move(data_);
  data_.clear();
  on_event_(data);
}

}  // namespace loom::bench
