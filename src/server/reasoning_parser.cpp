// The reasoning splitter: before the start marker only whitespace may come
// (else there is no reasoning section); inside, text up to the end marker is
// reasoning; whitespace right after the end marker is dropped.
#include "server/reasoning_parser.h"

namespace loom::server {

namespace {

size_t marker_prefix_at_end(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

bool only_space(std::string_view s) {
  return s.find_first_not_of(" \n\t\r") == std::string_view::npos;
}

}  // namespace

std::optional<ReasoningFormat> reasoning_format(std::string_view name) {
  if (name == "qwen3" || name == "deepseek_r1")
    return ReasoningFormat{std::string(name), "<think>", "</think>"};
  return std::nullopt;
}

std::vector<std::string> reasoning_format_names() {
  return {"qwen3", "deepseek_r1"};
}

ReasoningParser::ReasoningParser(ReasoningFormat format, bool started)
    : format_(std::move(format)), state_(started ? State::Reasoning : State::Start) {}

ReasoningParser::Delta ReasoningParser::push(std::string_view text) {
  buf_ += text;
  Delta out;
  for (;;) {
    if (state_ == State::Start) {
      const size_t lead = buf_.find_first_not_of(" \n\t\r");
      if (lead == std::string::npos) return out;
      const std::string_view rest = std::string_view(buf_).substr(lead);
      if (rest.substr(0, format_.start.size()) == format_.start) {
        buf_.erase(0, lead + format_.start.size());
        state_ = State::Reasoning;
        continue;
      }
      if (rest.size() < format_.start.size() && format_.start.compare(0, rest.size(), rest) == 0)
        return out;  // may still become the marker
      state_ = State::Content;
      continue;
    }
    if (state_ == State::Reasoning) {
      const size_t at = buf_.find(format_.end);
      if (at != std::string::npos) {
        out.reasoning += buf_.substr(0, at);
        buf_.erase(0, at + format_.end.size());
        // Whitespace after the section is not content.
        const size_t lead = buf_.find_first_not_of(" \n\t\r");
        buf_.erase(0, lead == std::string::npos ? buf_.size() : lead);
        state_ = State::Content;
        skip_space_ = lead == std::string::npos;
        continue;
      }
      const size_t hold = marker_prefix_at_end(buf_, format_.end);
      out.reasoning += buf_.substr(0, buf_.size() - hold);
      buf_.erase(0, buf_.size() - hold);
      return out;
    }
    if (skip_space_) {
      const size_t lead = buf_.find_first_not_of(" \n\t\r");
      if (lead == std::string::npos) {
        buf_.clear();
        return out;
      }
      buf_.erase(0, lead);
      skip_space_ = false;
    }
    out.content += buf_;
    buf_.clear();
    return out;
  }
}

ReasoningParser::Delta ReasoningParser::finish() {
  Delta out;
  if (state_ == State::Reasoning)
    out.reasoning += buf_;
  else if (!skip_space_ || !only_space(buf_))
    out.content += buf_;
  buf_.clear();
  return out;
}

}  // namespace loom::server
