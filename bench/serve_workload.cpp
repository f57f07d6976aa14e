#include "serve_workload.h"

#include <algorithm>
#include <random>
#include <sstream>

#include "core/error.h"
#include "workload.h"

namespace loom::bench {

namespace {

// Common English words, each a single token (with its leading space) in the
// GPT-2, Llama-3, Qwen2 and Gemma vocabularies as far as we checked; the
// calibration corrects the rest.
const char* const kWordList =
    "the of and to in is was for on that with as by at from his he it an were are which this be "
    "or has had first one their its new after who they have her she two been other when there all "
    "during into school time may years more most only over city some world would where later up "
    "such used many can state about national out known university united then made also between "
    "through both under year him states three people these part well water being while since "
    "four same each because around before several life house small long south north west east "
    "family river game team name work book way day back film music line group end place power land "
    "said like just what could them than did any did how very make good great little man old right "
    "big high different following large next early young important few public bad able open "
    "seen light point home side head hand story fact month lot study night word change money form "
    "table paper green blue red black white road car tree field market price stone board window "
    "door garden summer winter morning evening friend father mother child country village";

std::vector<std::string> split_words() {
  std::vector<std::string> out;
  std::istringstream in(kWordList);
  std::string w;
  while (in >> w)
    if (std::find(out.begin(), out.end(), w) == out.end()) out.push_back(w);
  return out;
}

std::vector<int32_t> draw(std::mt19937_64& rng, const std::vector<int32_t>& ids, int32_t n) {
  std::vector<int32_t> out(static_cast<size_t>(std::max(0, n)));
  for (auto& id : out) id = ids[rng() % ids.size()];
  return out;
}

}  // namespace

const std::vector<std::string>& prompt_words() {
  static const std::vector<std::string> words = split_words();
  return words;
}

std::string render_words(const std::vector<int32_t>& word_ids) {
  const auto& words = prompt_words();
  std::string out;
  for (int32_t id : word_ids) {
    out += ' ';
    out += words[static_cast<size_t>(id) % words.size()];
  }
  return out;
}

std::vector<ServeConversation> make_serve_workload(const ServeWorkloadSpec& spec,
                                                   const std::vector<int32_t>& ids) {
  if (spec.num_requests < 1 || spec.num_requests > 10'000'000)
    LOOM_THROW("--num-requests {} is out of range", spec.num_requests);
  if (ids.empty()) LOOM_THROW("serve workload: no token ids to draw prompts from");
  std::vector<ServeConversation> out;
  WorkloadSpec w;
  w.num_requests = spec.num_requests;
  w.seed = spec.seed;
  w.input_len = spec.input_len;
  w.output_len = spec.output_len;
  w.max_len = spec.max_len;
  if (spec.dataset == "synthetic" || spec.dataset == "fixed") {
    w.dataset = spec.dataset == "synthetic" ? "sharegpt" : "fixed";
    for (auto& r : make_workload(w, ids)) {
      ServeConversation c;
      c.turns.push_back({std::move(r.prompt_ids), {}, r.output_len});
      out.push_back(std::move(c));
    }
    return out;
  }
  if (spec.input_len < 1 || spec.output_len < 1)
    LOOM_THROW("{} needs --input-len and --output-len >= 1", spec.dataset);
  w.dataset = "fixed";
  if (spec.dataset == "shared-prefix") {
    if (spec.num_prefixes < 1 || spec.prefix_len < 1)
      LOOM_THROW("shared-prefix needs --num-prefixes and --prefix-len >= 1");
    WorkloadSpec p = w;
    p.num_requests = spec.num_prefixes;
    p.input_len = spec.prefix_len;
    p.seed = spec.seed ^ 0x5eedULL;
    const auto prefixes = make_workload(p, ids);
    auto questions = make_workload(w, ids);
    for (size_t i = 0; i < questions.size(); ++i) {
      ServeConversation c;
      c.prefix = prefixes[i % prefixes.size()].prompt_ids;
      c.turns.push_back({std::move(questions[i].prompt_ids), {}, spec.output_len});
      out.push_back(std::move(c));
    }
    return out;
  }
  if (spec.dataset == "multi-turn") {
    if (spec.num_turns < 1 || spec.num_turns > 1000) LOOM_THROW("--num-turns must be in [1, 1000]");
    std::mt19937_64 rng(spec.seed);
    int64_t left = spec.num_requests;
    while (left > 0) {
      ServeConversation c;
      const int64_t turns = std::min<int64_t>(left, spec.num_turns);
      for (int64_t t = 0; t < turns; ++t)
        c.turns.push_back(
            {draw(rng, ids, spec.input_len), draw(rng, ids, spec.output_len), spec.output_len});
      left -= turns;
      out.push_back(std::move(c));
    }
    return out;
  }
  LOOM_THROW("unknown dataset '{}' (synthetic, fixed, shared-prefix, multi-turn)", spec.dataset);
}

int64_t calibrate_text(
    std::vector<ServeConversation>& convs,
    const std::function<std::optional<int64_t>(const std::string&)>& count_tokens, uint64_t seed,
    int max_rounds) {
  std::mt19937_64 rng(seed ^ 0xca11bULL);
  std::vector<int32_t> all(prompt_words().size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
  int64_t off = 0;
  auto fix = [&](std::vector<int32_t>& piece) {
    if (piece.empty()) return;
    const auto target = static_cast<int64_t>(piece.size());
    for (int round = 0; round < max_rounds; ++round) {
      const auto n = count_tokens(render_words(piece));
      if (!n) return;  // no tokenizer: keep one word per token
      if (*n == target) return;
      const int64_t want = static_cast<int64_t>(piece.size()) + (target - *n);
      if (want < 1) break;
      if (want < static_cast<int64_t>(piece.size())) {
        piece.resize(static_cast<size_t>(want));
      } else {
        while (static_cast<int64_t>(piece.size()) < want) piece.push_back(all[rng() % all.size()]);
      }
    }
    const auto n = count_tokens(render_words(piece));
    if (n && *n != target) ++off;
  };
  // Pieces shared by several conversations (prefixes) are fixed once.
  std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> done_prefixes;
  for (auto& c : convs) {
    if (!c.prefix.empty()) {
      auto it = std::find_if(done_prefixes.begin(), done_prefixes.end(),
                             [&](const auto& p) { return p.first == c.prefix; });
      if (it != done_prefixes.end()) {
        c.prefix = it->second;
      } else {
        auto original = c.prefix;
        fix(c.prefix);
        done_prefixes.emplace_back(std::move(original), c.prefix);
      }
    }
    for (auto& t : c.turns) {
      fix(t.question);
      fix(t.answer);
    }
  }
  return off;
}

nlohmann::json request_body(const ServeConversation& conv, size_t turn,
                            const std::vector<std::string>& answers, const BodyOptions& opt,
                            int64_t* prompt_len) {
  LOOM_CHECK(turn < conv.turns.size(), "turn {} of a {}-turn conversation", turn,
             conv.turns.size());
  nlohmann::json body;
  if (!opt.model.empty()) body["model"] = opt.model;
  int64_t len = static_cast<int64_t>(conv.prefix.size());
  auto answer_text = [&](size_t k) {
    return k < answers.size() && !answers[k].empty() ? answers[k]
                                                     : render_words(conv.turns[k].answer);
  };
  if (opt.endpoint == ServeEndpoint::Chat) {
    nlohmann::json messages = nlohmann::json::array();
    if (!conv.prefix.empty())
      messages.push_back({{"role", "system"}, {"content", render_words(conv.prefix)}});
    for (size_t k = 0; k <= turn; ++k) {
      messages.push_back({{"role", "user"}, {"content", render_words(conv.turns[k].question)}});
      len += static_cast<int64_t>(conv.turns[k].question.size());
      if (k == turn) break;
      messages.push_back({{"role", "assistant"}, {"content", answer_text(k)}});
      len += static_cast<int64_t>(conv.turns[k].answer.size());
    }
    body["messages"] = std::move(messages);
  } else if (opt.token_ids) {
    std::vector<int32_t> ids = conv.prefix;
    for (size_t k = 0; k <= turn; ++k) {
      ids.insert(ids.end(), conv.turns[k].question.begin(), conv.turns[k].question.end());
      if (k < turn) ids.insert(ids.end(), conv.turns[k].answer.begin(), conv.turns[k].answer.end());
    }
    len = static_cast<int64_t>(ids.size());
    body["prompt"] = std::move(ids);
  } else {
    std::string text = render_words(conv.prefix);
    for (size_t k = 0; k <= turn; ++k) {
      text += render_words(conv.turns[k].question);
      len += static_cast<int64_t>(conv.turns[k].question.size());
      if (k == turn) break;
      text += answer_text(k);
      len += static_cast<int64_t>(conv.turns[k].answer.size());
    }
    body["prompt"] = std::move(text);
  }
  body["max_tokens"] = conv.turns[turn].output_len;
  body["temperature"] = opt.temperature;
  body["stream"] = true;
  if (opt.include_usage) body["stream_options"] = {{"include_usage", true}};
  if (opt.ignore_eos) body["ignore_eos"] = true;
  if (prompt_len) *prompt_len = len;
  return body;
}

}  // namespace loom::bench
