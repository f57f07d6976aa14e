// loom render: OpenAI-style messages on stdin -> the model's chat-template output.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "cli_app.h"
#include "core/error.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace loom::cli {

int cmd_render(int argc, char** argv) {
  CLI::App app{"Render chat messages (JSON on stdin: an array, or {\"messages\": [...], ...}) "
               "with the model's chat template"};
  show_defaults(app);
  std::string model;
  bool no_generation_prompt = false;
  app.add_option("--model", model, "a .gguf file or an HF model directory")->required();
  app.add_flag("--no-generation-prompt", no_generation_prompt,
               "do not append the assistant turn's opening");
  LOOM_PARSE(app, argc, argv);
  return guarded("render", [&] {
    auto input = nlohmann::ordered_json::parse(read_stdin(), nullptr, false);
    if (input.is_discarded()) LOOM_THROW("stdin is not valid JSON");
    nlohmann::ordered_json extra = nlohmann::ordered_json::object();
    nlohmann::ordered_json messages = input;
    if (input.is_object()) {
      if (!input.contains("messages")) LOOM_THROW("expected \"messages\" in the input object");
      messages = input["messages"];
      for (const char* key : {"tools", "documents", "enable_thinking"})
        if (input.contains(key)) extra[key] = input[key];
    }
    auto bundle = load_tokenizer_bundle(model);
    if (!bundle.chat) LOOM_THROW("{} has no chat template", model);
    std::fputs(bundle.chat->render(messages, !no_generation_prompt, extra).c_str(), stdout);
    return 0;
  });
}

}  // namespace loom::cli
