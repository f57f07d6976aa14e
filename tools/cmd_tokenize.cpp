// loom tokenize / detokenize: the model's tokenizer on stdin/stdout.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "cli_app.h"
#include "core/error.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace loom::cli {

int cmd_tokenize(int argc, char** argv) {
  CLI::App app{"Tokenise UTF-8 text read from stdin; prints token ids"};
  show_defaults(app);
  std::string model;
  bool special = false, json = false;
  app.add_option("--model", model, "a .gguf file or an HF model directory")->required();
  app.add_flag("--special", special,
               "add the model's special tokens (bos) and read special-token text such as "
               "<|im_start|> as those tokens");
  app.add_flag("--json", json, "print {\"ids\": [...], \"tokens\": [...]}");
  LOOM_PARSE(app, argc, argv);
  return guarded("tokenize", [&] {
    auto bundle = load_tokenizer_bundle(model);
    const std::string text = read_stdin();
    const auto ids = bundle.tokenizer->encode(text, special, special);
    if (json) {
      nlohmann::json out = {{"ids", ids}, {"tokens", nlohmann::json::array()}};
      for (int32_t id : ids)
        out["tokens"].push_back(bundle.tokenizer->decode({id}, /*skip_special=*/false));
      std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
      std::printf("\n");
    }
    return 0;
  });
}

int cmd_detokenize(int argc, char** argv) {
  CLI::App app{"Decode token ids read from stdin (\"1 2 3\", \"1,2,3\" or a JSON array)"};
  show_defaults(app);
  std::string model;
  bool special = false;
  app.add_option("--model", model, "a .gguf file or an HF model directory")->required();
  app.add_flag("--special", special, "keep special tokens' text in the output");
  LOOM_PARSE(app, argc, argv);
  return guarded("detokenize", [&] {
    auto bundle = load_tokenizer_bundle(model);
    const auto ids = parse_id_list(read_stdin());
    for (int32_t id : ids)
      if (id >= bundle.tokenizer->vocab_size())
        LOOM_THROW("token id {} is outside the vocabulary (size {})", id,
                   bundle.tokenizer->vocab_size());
    std::fputs(bundle.tokenizer->decode(ids, !special).c_str(), stdout);
    return 0;
  });
}

}  // namespace loom::cli
