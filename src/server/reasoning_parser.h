// Reasoning sections in model output (Qwen3 / DeepSeek-R1 style
// <think>...</think>) -> reasoning_content, incrementally; the rest is
// content. A marker prefix at the end of a chunk is held back. When the
// prompt already opened the section (the template ends with "<think>\n"),
// the output starts inside it. Not thread-safe (one per choice).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom::server {

struct ReasoningFormat {
  std::string name;   // qwen3, deepseek_r1
  std::string start;  // "<think>"
  std::string end;    // "</think>"
};

std::optional<ReasoningFormat> reasoning_format(std::string_view name);
std::vector<std::string> reasoning_format_names();

class ReasoningParser {
 public:
  // started: the prompt ends inside the reasoning section.
  ReasoningParser(ReasoningFormat format, bool started);
  struct Delta {
    std::string reasoning, content;
  };
  Delta push(std::string_view text);
  Delta finish();

 private:
  enum class State { Start, Reasoning, Content };
  ReasoningFormat format_;
  State state_;
  std::string buf_;
  bool skip_space_ = false;  // whitespace after the end marker is still arriving
};

}  // namespace loom::server
