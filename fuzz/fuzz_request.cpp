// libFuzzer harness for request parsing: OpenAI completions and chat bodies
// (server/openai_request.h) and the /v1/messages and /v1/responses bodies
// their adapters translate into chat bodies (anthropic_api.h,
// responses_api.h). Any body must either parse into a valid request or
// raise ApiError — no crash, no other exception, no unbounded work.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/anthropic_api.h"
#include "server/api_error.h"
#include "server/json_body.h"
#include "server/openai_request.h"
#include "server/responses_api.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace {

struct Context {
  std::unique_ptr<loom::Tokenizer> tokenizer;
  std::unique_ptr<loom::ChatFormatter> chat;
  loom::server::ModelContext model;
  Context() {
    tokenizer =
        loom::load_tokenizer_hf(std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/tokenizer/qwen2");
    chat = std::make_unique<loom::ChatFormatter>(
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
        "", "<|im_end|>");
    model.name = "m";
    model.tokenizer = tokenizer.get();
    model.chat = chat.get();
    model.max_model_len = 4096;
    model.vocab_size = tokenizer->vocab_size();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Context ctx;
  loom::server::RequestLimits limits;
  limits.max_body_bytes = 1 << 16;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (int chat = 0; chat < 2; ++chat) {
    try {
      auto r = chat ? loom::server::parse_chat_request(body, ctx.model, limits)
                    : loom::server::parse_completion_request(body, ctx.model, limits);
      // A parsed request honours every bound.
      if (r.prompts.empty() || r.num_choices() > limits.max_choices) __builtin_trap();
      for (const auto& p : r.prompts)
        if (p.empty() || int64_t(p.size()) + r.params.max_tokens > ctx.model.max_model_len)
          __builtin_trap();
    } catch (const loom::server::ApiError&) {
    }
  }
  // The other APIs' routes: translated bodies are valid chat requests.
  for (int api = 0; api < 2; ++api) {
    try {
      const auto parsed =
          loom::server::parse_json_body(body, limits.max_body_bytes, limits.max_json_depth);
      auto adapter = api ? loom::server::make_responses_adapter(nullptr)
                         : loom::server::make_anthropic_adapter(nullptr);
      const auto chat = adapter->translate(parsed, ctx.model, limits);
      auto r = loom::server::parse_generation_request(loom::server::Endpoint::ChatCompletions, chat,
                                                      ctx.model, limits);
      if (r.prompts.size() != 1 || r.params.n != 1) __builtin_trap();
    } catch (const loom::server::ApiError&) {
    }
  }
  return 0;
}
