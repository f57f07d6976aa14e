// loom generate: one prompt (text, chat or token ids) through the engine,
// streamed to stdout, or with --json one object {prompt_ids, output_ids, text,
// finish_reason}.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "cli_app.h"
#include "core/error.h"
#include "runtime.h"
#include "server/api_error.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace loom::cli {

namespace {

struct GenerateFlags {
  std::string prompt;
  std::string prompt_ids;
  std::string system;
  bool chat = false;
  bool json = false;
  int32_t max_tokens = 256;
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int32_t> top_k;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool ignore_eos = false;
};

// The prompt's token ids from --prompt-ids, or --prompt (through the chat
// template with --chat).
std::vector<int32_t> prompt_tokens(const GenerateFlags& f, const ModelRuntime& rt) {
  if (!f.prompt_ids.empty()) {
    if (!f.prompt.empty()) LOOM_THROW("give --prompt or --prompt-ids, not both");
    auto ids = parse_id_list(f.prompt_ids);
    for (int32_t id : ids)
      if (id >= rt.model.config.vocab_size)
        LOOM_THROW("--prompt-ids: {} is outside the vocabulary (size {})", id, rt.model.config.vocab_size);
    return ids;
  }
  if (f.prompt.empty()) LOOM_THROW("give --prompt TEXT or --prompt-ids 1,2,3");
  if (!rt.text.tokenizer) LOOM_THROW("{} has no tokenizer: use --prompt-ids", rt.model.path);
  const Tokenizer& tok = *rt.text.tokenizer;
  if (!f.chat) return tok.encode(f.prompt, /*add_special=*/true, /*parse_special=*/false);
  if (!rt.text.chat) LOOM_THROW("{} has no chat template: drop --chat", rt.model.path);
  nlohmann::json messages = nlohmann::json::array();
  if (!f.system.empty()) messages.push_back({{"role", "system"}, {"content", f.system}});
  messages.push_back({{"role", "user"}, {"content", f.prompt}});
  // The rendered template carries its own bos where the model wants one.
  return tok.encode(rt.text.chat->render(messages, true), /*add_special=*/false, /*parse_special=*/true);
}

SamplingParams sampling_params(const GenerateFlags& f, const GenerationDefaults& d) {
  SamplingParams p;
  p.max_tokens = f.max_tokens;
  p.temperature = f.temperature.value_or(static_cast<float>(d.temperature.value_or(1.0)));
  if (d.do_sample && !*d.do_sample && !f.temperature) p.temperature = 0.0f;
  p.top_p = f.top_p.value_or(static_cast<float>(d.top_p.value_or(1.0)));
  p.top_k = f.top_k.value_or(static_cast<int32_t>(d.top_k.value_or(0)));
  p.min_p = f.min_p.value_or(static_cast<float>(d.min_p.value_or(0.0)));
  p.repetition_penalty = f.repetition_penalty.value_or(static_cast<float>(d.repetition_penalty.value_or(1.0)));
  p.seed = f.seed;
  p.stop = f.stop;
  p.ignore_eos = f.ignore_eos;
  return p;
}

// --batch-file: each line is a completions-API body (or a chat one, with
// "messages") plus an "id"; all lines run concurrently through the engine and
// each choice prints one JSON line {id, index, output_ids, text,
// finish_reason} in input order. A bad line prints {id, error} and makes the
// exit code 1; the other lines still run.
int run_batch_file(const std::string& path, ModelRuntime& rt) {
  std::ifstream in(path);
  if (!in) LOOM_THROW("--batch-file: cannot read {}", path);
  if (!rt.text.tokenizer) LOOM_THROW("{} has no tokenizer: --batch-file needs one", rt.model.path);
  server::ModelContext ctx;
  ctx.tokenizer = rt.text.tokenizer.get();
  ctx.chat = rt.text.chat ? &*rt.text.chat : nullptr;
  ctx.vocab_size = static_cast<int32_t>(rt.model.config.vocab_size);
  ctx.max_model_len = static_cast<int32_t>(rt.model.config.max_position);
  server::RequestLimits limits;

  struct Line {
    nlohmann::json id;
    std::string error;
    size_t first = 0, count = 0;  // its requests in `requests`
  };
  std::vector<Line> lines;
  std::vector<Request> requests;
  std::string text;
  for (int64_t n = 1; std::getline(in, text); ++n) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    Line line;
    line.id = n;
    try {
      auto body = nlohmann::json::parse(text, nullptr, false);
      if (body.is_discarded() || !body.is_object()) LOOM_THROW("line {} is not a JSON object", n);
      if (body.contains("id")) line.id = body["id"];
      const bool chat = body.contains("messages");
      auto req = server::parse_generation_request(
          chat ? server::Endpoint::ChatCompletions : server::Endpoint::Completions, body, ctx, limits);
      line.first = requests.size();
      for (auto& prompt : req.prompts) {
        Request r;
        r.external_id = line.id.is_string() ? line.id.get<std::string>() : line.id.dump();
        r.prompt_ids = std::move(prompt);
        r.params = req.params;
        r.priority = req.priority;
        requests.push_back(std::move(r));
      }
      line.count = requests.size() - line.first;
    } catch (const std::exception& e) {
      line.error = e.what();
    }
    lines.push_back(std::move(line));
  }
  rt.engine->start();
  auto results = rt.engine->generate(std::move(requests));
  rt.engine->stop();
  int rc = 0;
  auto print = [](const nlohmann::json& j) {
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  };
  for (const auto& line : lines) {
    if (!line.error.empty()) {
      print({{"id", line.id}, {"error", line.error}});
      rc = 1;
      continue;
    }
    int32_t index = 0;
    for (size_t i = line.first; i < line.first + line.count; ++i) {
      const Result& r = results[i];
      if (r.error != EngineErrorKind::None) {
        print({{"id", line.id}, {"index", index++}, {"error", r.error_message}});
        rc = 1;
        continue;
      }
      for (const auto& seq : r.sequences) {
        nlohmann::json choice = {{"id", line.id},
                                 {"index", index++},
                                 {"output_ids", seq.output_ids},
                                 {"text", seq.text},
                                 {"finish_reason", finish_reason_name(seq.finish_reason)}};
        if (!seq.logprobs
                 .empty()) {  // per token: its logprob and the best alternatives [[id, logprob]...]
          nlohmann::json lps = nlohmann::json::array();
          for (const SampleResult& t : seq.logprobs) {
            nlohmann::json top = nlohmann::json::array();
            for (const TokenLogprob& alt : t.top) top.push_back({alt.token, alt.logprob});
            lps.push_back({{"token", t.token}, {"logprob", t.logprob}, {"top", top}});
          }
          choice["logprobs"] = lps;
        }
        print(choice);
      }
    }
  }
  return rc;
}

}  // namespace

int cmd_generate(int argc, char** argv) {
  CLI::App app{"Generate a continuation of a prompt"};
  show_defaults(app);
  RuntimeOptions ro;
  GenerateFlags f;
  add_runtime_options(app, ro);
  app.add_option("--prompt", f.prompt, "prompt text");
  app.add_option("--prompt-ids", f.prompt_ids, "prompt token ids, e.g. 1,2,3");
  app.add_flag("--chat", f.chat, "wrap --prompt as a user message in the model's chat template");
  app.add_option("--system", f.system, "with --chat: a system message");
  app.add_option("--max-tokens", f.max_tokens, "tokens to generate at most")->check(CLI::Range(1, 1 << 20));
  app.add_option("--temperature", f.temperature, "0: greedy (default: the model's, else 1)");
  app.add_option("--top-p", f.top_p, "nucleus sampling mass");
  app.add_option("--top-k", f.top_k, "sample among the k most likely tokens (0: all)");
  app.add_option("--min-p", f.min_p, "drop tokens below min-p times the top probability");
  app.add_option("--repetition-penalty", f.repetition_penalty, "HF-style repetition penalty");
  app.add_option("--stop", f.stop, "stop string (repeatable)");
  app.add_flag("--ignore-eos", f.ignore_eos, "keep generating past end-of-sequence tokens");
  app.add_option("--seed", f.seed, "sampling seed (same seed, same tokens)");
  app.add_flag("--json", f.json, "print one JSON object: prompt_ids, output_ids, text, finish_reason");
  std::string batch_file;
  app.add_option("--batch-file", batch_file,
                 "JSONL of completions-API bodies with an \"id\"; runs them all concurrently and prints "
                 "one JSON line per choice (with \"logprobs\" when asked)");
  LOOM_PARSE(app, argc, argv);
  return guarded("generate", [&] {
    auto rt = build_runtime(ro);
    if (!batch_file.empty()) return run_batch_file(batch_file, *rt);
    Request req;
    req.prompt_ids = prompt_tokens(f, *rt);
    req.params = sampling_params(f, rt->model.generation);

    EventQueue events;
    rt->engine->start();
    rt->engine->submit(req, [&events](const StreamEvent& e) { events.push(e); });
    std::vector<int32_t> output_ids;
    std::string text;
    FinishReason finish = FinishReason::None;
    for (;;) {
      StreamEvent e = events.pop();
      if (e.error != EngineErrorKind::None) LOOM_THROW("{}", e.error_message);
      output_ids.insert(output_ids.end(), e.token_ids.begin(), e.token_ids.end());
      text += e.text;
      if (!f.json && !e.text.empty()) {
        std::fputs(e.text.c_str(), stdout);
        std::fflush(stdout);
      }
      if (e.finish != FinishReason::None) finish = e.finish;
      if (e.request_done) break;
    }
    rt->engine->stop();
    if (f.json) {
      nlohmann::json out = {{"prompt_ids", req.prompt_ids},
                            {"output_ids", output_ids},
                            {"text", text},
                            {"finish_reason", finish_reason_name(finish)}};
      std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::printf("\n");
    }
    return 0;
  });
}

}  // namespace loom::cli
