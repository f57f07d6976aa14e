// grammar_walk: random walks over the tokens a constraint allows, on a real
// model's vocabulary, printed as JSON lines for tests/structured/test_walk.py
// to validate (jsonschema, re, json). Whatever the model's weights, a sampler
// that only picks allowed tokens produces one of these walks, so if every
// walk validates the masks are right.
//   grammar_walk --model M.gguf --cases cases.jsonl --samples N [--seed S] [--max-tokens T]
// A case: {"name", "kind": json_schema|json_object|regex|grammar|choice, "spec"}.
// Output per walk: {"name", "sample", "text", "tokens", "terminated", "mask_us"}
// or per case {"name", "error"} when it does not compile.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "structured/grammar_compiler.h"
#include "structured/grammar_spec.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

using namespace loom;
using namespace loom::structured;
using json = nlohmann::ordered_json;

namespace {

GrammarSpec spec_of(const json& c) {
  const std::string kind = c.at("kind").get<std::string>();
  const json& s = c.contains("spec") ? c["spec"] : json();
  if (kind == "json_schema") return json_schema_spec(s);
  if (kind == "json_object") return json_object_spec();
  if (kind == "regex") return regex_spec(s.get<std::string>());
  if (kind == "grammar") return ebnf_spec(s.get<std::string>());
  if (kind == "choice") return choice_spec(s.get<std::vector<std::string>>());
  throw std::runtime_error("unknown kind " + kind);
}

// Which allowed token to take. Uniform at first; past `soft` steps a mix
// that makes walks end (a uniform walk inside an unbounded string or array
// only ends by chance): a fifth uniform, three tenths one-byte tokens (a
// terminator among a few dozen characters comes soon), otherwise the first
// non-empty class of: stop tokens, tokens made of " } ] only, tokens holding
// a " or @ (string and e-mail local-part ends), one-byte tokens.
int32_t pick(const std::vector<int32_t>& allowed, const Tokenizer& tok, int step, int soft,
             std::mt19937_64& rng) {
  auto uniform = [&](const std::vector<int32_t>& v) {
    return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
  };
  const double r = std::uniform_real_distribution<double>(0, 1)(rng);
  if (step < soft || r < 0.2) return uniform(allowed);
  std::vector<int32_t> stop, closers, marks, single;
  const auto& eos = tok.special().eos_ids;
  for (int32_t id : allowed) {
    if (std::find(eos.begin(), eos.end(), id) != eos.end()) {
      stop.push_back(id);
      continue;
    }
    const std::string b = tok.token_bytes(id, false);
    if (b.size() == 1) single.push_back(id);
    if (!b.empty() && b.find_first_not_of("\"}]") == std::string::npos)
      closers.push_back(id);
    else if (b.find_first_of("\"@") != std::string::npos)
      marks.push_back(id);
  }
  if (r < 0.5 && !single.empty()) return uniform(single);
  for (const auto* c : {&stop, &closers, &marks, &single})
    if (!c->empty()) return uniform(*c);
  return uniform(allowed);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, cases_path;
  int samples = 10, max_tokens = 2000, soft = 48, compile_ms = 20000;
  uint64_t seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--model")
      model = argv[i + 1];
    else if (a == "--cases")
      cases_path = argv[i + 1];
    else if (a == "--samples")
      samples = std::stoi(argv[i + 1]);
    else if (a == "--seed")
      seed = std::stoull(argv[i + 1]);
    else if (a == "--max-tokens")
      max_tokens = std::stoi(argv[i + 1]);
    else if (a == "--soft-tokens")
      soft = std::stoi(argv[i + 1]);
    else if (a == "--compile-ms")
      compile_ms = std::stoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "grammar_walk: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (model.empty() || cases_path.empty()) {
    std::fprintf(stderr, "usage: grammar_walk --model M --cases FILE [--samples N] [--seed S]\n");
    return 2;
  }
  auto bundle = load_tokenizer_bundle(model);
  const Tokenizer& tok = *bundle.tokenizer;
  CompilerOptions opts;
  opts.max_compile_time = std::chrono::milliseconds(compile_ms);
  GrammarCompiler compiler(tok, tok.vocab_size(), opts);
  std::mt19937_64 rng(seed);
  std::ifstream in(cases_path);
  std::string line;
  std::vector<uint32_t> words(size_t((tok.vocab_size() + 31) / 32));
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const json c = json::parse(line);
    const std::string name = c.at("name").get<std::string>();
    std::shared_ptr<const TokenConstraintFactory> factory;
    try {
      const auto t0 = std::chrono::steady_clock::now();
      factory = compiler.compile(spec_of(c));
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      std::cout << json{{"name", name}, {"compile_ms", ms}}.dump() << "\n";
    } catch (const std::exception& e) {
      std::cout << json{{"name", name}, {"error", e.what()}}.dump() << "\n";
      continue;
    }
    for (int s = 0; s < samples; ++s) {
      auto constraint = factory->make();
      std::vector<int32_t> ids, allowed;
      double mask_us = 0;
      bool terminated = false, rejected = false;
      for (int step = 0; step < max_tokens; ++step) {
        std::fill(words.begin(), words.end(), 0u);
        const auto t0 = std::chrono::steady_clock::now();
        const bool masked = constraint->fill_next_token_bitmask(words);
        mask_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                       .count();
        allowed.clear();
        for (int32_t t = 0; t < tok.vocab_size(); ++t)
          if (!masked || (words[size_t(t) / 32] >> (t % 32)) & 1u) allowed.push_back(t);
        if (allowed.empty()) break;  // a dead end: reported as not terminated
        const int32_t t = pick(allowed, tok, step, soft, rng);
        if (!constraint->accept_token(t)) {
          rejected = true;
          break;
        }
        ids.push_back(t);
        if (constraint->is_terminated()) {
          terminated = true;
          break;
        }
      }
      std::cout << json{{"name", name},
                        {"sample", s},
                        {"text", tok.decode(ids, /*skip_special=*/true)},
                        {"tokens", ids.size()},
                        {"terminated", terminated},
                        {"rejected_allowed_token", rejected},
                        {"mask_us", ids.empty() ? 0.0 : mask_us / double(ids.size())}}
                       .dump(-1, ' ', false, json::error_handler_t::replace)
                << "\n";
    }
  }
  return 0;
}
