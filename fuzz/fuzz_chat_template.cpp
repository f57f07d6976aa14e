// libFuzzer harness for chat templates (tokenizer/jinja): a model file brings
// its own template, so the template text is untrusted input. The input is a
// template, optionally followed by a line "#messages#" and a JSON body of
// messages. Any template must parse and render, or raise loom::Error - no
// crash, no other exception, and within the budgets (steps, output, depth).
// The messages go through normalize_messages first, as the server does.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "tokenizer/chat.h"
#include "tokenizer/jinja/chat_template.h"

namespace {

const nlohmann::ordered_json& default_messages() {
  static const auto m = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "add", "arguments": "{\"a\": 2, \"b\": 2}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "4"},
    {"role": "assistant", "content": "4"},
    {"role": "user", "content": [{"type": "text", "text": "and 3+3?"}]}])");
  return m;
}

const nlohmann::ordered_json& tools() {
  static const auto t = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {
    "name": "add", "description": "adds", "parameters": {"type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}])");
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view kSplit = "\n#messages#\n";
  const size_t split = input.find(kSplit);
  const std::string source(input.substr(0, split));
  nlohmann::ordered_json messages = default_messages();
  if (split != std::string_view::npos) {
    auto parsed = nlohmann::ordered_json::parse(input.substr(split + kSplit.size()), nullptr, false);
    if (parsed.is_discarded()) return 0;
    try {
      messages = loom::normalize_messages(parsed);
    } catch (const loom::Error&) {
      return 0;
    }
  }
  // Budgets small enough for many runs a second; the same code paths as the
  // defaults, which only allow more.
  loom::TemplateLimits limits;
  limits.max_steps = 200000;
  limits.max_output_bytes = 1 << 20;
  limits.max_depth = 64;
  try {
    loom::ChatTemplate tmpl(source, limits);
    nlohmann::ordered_json ctx = {{"messages", messages},
                                  {"tools", tools()},
                                  {"add_generation_prompt", true},
                                  {"bos_token", "<s>"},
                                  {"eos_token", "</s>"}};
    loom::RenderOptions options;
    options.now_unix_seconds = 1700000000;
    const std::string out = tmpl.render(ctx, options);
    if (out.size() > size_t(limits.max_output_bytes)) __builtin_trap();
  } catch (const loom::Error&) {
  }
  return 0;
}
