// Workloads of the serving benchmark (`loom bench serve`) and the request
// bodies sent for them. Every dataset is a list of conversations; all but
// multi-turn have one turn. Token ids come from make_workload (workload.h), so
// the ShareGPT-like lengths are the ones every other benchmark uses.
//   synthetic      ShareGPT-like lengths (workload.h), one turn each
//   fixed          --input-len / --output-len
//   shared-prefix  N system prompts (--num-prefixes x --prefix-len tokens), each
//                  followed by its share of the questions (--input-len tokens)
//   multi-turn     conversations of --num-turns turns; turn k resends the
//                  whole history (earlier questions and answers) + question k
// Prompts go out either as token-id lists (`prompt: [ids]`, completions only:
// exact lengths, no tokenizer needed) or as text made of common English words
// (one word is one token in the usual BPE vocabularies; lengths are corrected
// with the server's tokenizer endpoint when it has one: calibrate_text).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace loom::bench {

struct ServeTurn {
  std::vector<int32_t> question;  // token ids, or word indices in text mode
  std::vector<int32_t> answer;    // history stand-in when the real answer is unknown
  int32_t output_len = 0;
};

struct ServeConversation {
  std::vector<int32_t> prefix;  // system prompt (shared-prefix), else empty
  std::vector<ServeTurn> turns;
};

struct ServeWorkloadSpec {
  std::string dataset = "synthetic";  // synthetic | fixed | shared-prefix | multi-turn
  int64_t num_requests = 100;         // requests in all (turns, for multi-turn)
  uint64_t seed = 0;
  int32_t input_len = 128;   // fixed / question length (shared-prefix, multi-turn)
  int32_t output_len = 128;  // fixed / shared-prefix / multi-turn
  int32_t max_len = 1024;    // cap of synthetic lengths
  int32_t num_prefixes = 4;
  int32_t prefix_len = 256;
  int32_t num_turns = 4;
};

// `ids` are the token ids (or word indices) prompts draw from. Throws
// loom::Error on a bad spec.
std::vector<ServeConversation> make_serve_workload(const ServeWorkloadSpec& spec,
                                                   const std::vector<int32_t>& ids);

// The word list of text prompts: word i renders as " " + kWords[i].
const std::vector<std::string>& prompt_words();
std::string render_words(const std::vector<int32_t>& word_ids);

// Text mode: makes every piece (prefix, question, answer) count as many
// tokens as its length asked for, by adding or dropping words, using
// `count_tokens(text)` (the server's tokenizer; returns nullopt if it cannot).
// Returns the number of pieces that still differ after `max_rounds` tries.
int64_t calibrate_text(
    std::vector<ServeConversation>& convs,
    const std::function<std::optional<int64_t>(const std::string&)>& count_tokens, uint64_t seed,
    int max_rounds = 4);

enum class ServeEndpoint { Completions, Chat };

struct BodyOptions {
  ServeEndpoint endpoint = ServeEndpoint::Completions;
  bool token_ids = true;  // prompt as ids (completions only) or as text
  std::string model;
  bool ignore_eos = true;
  bool include_usage = true;
  double temperature = 0;
};

// Body of turn `turn` of `conv`. `answers` holds the text the server returned
// for earlier turns (text mode, chat) - where missing, the turn's stand-in
// answer is used. The number of prompt tokens the body should hold is
// written to *prompt_len (ids or words).
nlohmann::json request_body(const ServeConversation& conv, size_t turn,
                            const std::vector<std::string>& answers, const BodyOptions& opt,
                            int64_t* prompt_len);

}  // namespace loom::bench
