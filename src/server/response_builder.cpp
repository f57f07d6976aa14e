// OpenAI response and SSE chunk bodies for completions and chat completions.
#include "server/response_builder.h"

#include "tokenizer/tokenizer.h"

namespace loom::server {

using nlohmann::json;

namespace {
// Output JSON: invalid UTF-8 (never expected: the engine emits valid text) is
// replaced rather than throwing.
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}
}  // namespace

std::string finish_reason_string(FinishReason reason) {
  return std::string(finish_reason_name(reason));
}

ResponseBuilder::ResponseBuilder(const GenerationRequest& request, const Tokenizer& tokenizer,
                                 std::string id, int64_t created)
    : request_(request), tokenizer_(tokenizer), id_(std::move(id)), created_(created) {
  {
    // chunk_base() without its choices, as dumped: its keys come in order.
    json base = chunk_base();
    base.erase("choices");
    const std::string rest = dump(base);  // {"created":...}
    chunk_tail_ = "]," + rest.substr(1);
  }
  choices_.resize(size_t(request.num_choices()));
  prompt_scores_.resize(request.prompts.size());
  const bool chat = request.endpoint == Endpoint::ChatCompletions;
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (chat) choices_[i].parser.emplace(request.reasoning, request.reasoning_started, request.tool_parser);
    if (request.logprobs)
      choices_[i].logprobs = chat ? json{{"content", json::array()}}
                                  : json{{"tokens", json::array()},
                                         {"token_logprobs", json::array()},
                                         {"top_logprobs", json::array()},
                                         {"text_offset", json::array()}};
    if (request.echo && !request.stream) {
      const auto& prompt = request.prompt_texts[i / size_t(request.params.n)];
      choices_[i].text = prompt;
      choices_[i].text_offset = int64_t(prompt.size());
    }
  }
}

Usage ResponseBuilder::usage() const {
  return {request_.prompt_tokens(), completion_tokens_};
}

json ResponseBuilder::chunk_base() const {
  const bool chat = request_.endpoint == Endpoint::ChatCompletions;
  json j = {{"id", id_},
            {"object", chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created_},
            {"model", request_.model},
            {"choices", json::array()}};
  if (request_.include_usage) j["usage"] = nullptr;
  return j;
}

// The logprobs of the event's tokens, in the endpoint's format; also appended
// to the choice's accumulated logprobs when not streaming.
json ResponseBuilder::logprobs_json(Choice& choice, const StreamEvent& event, int32_t prompt_index,
                                    bool with_prompt) {
  const bool chat = request_.endpoint == Endpoint::ChatCompletions;
  json out = chat ? json{{"content", json::array()}}
                  : json{{"tokens", json::array()},
                         {"token_logprobs", json::array()},
                         {"top_logprobs", json::array()},
                         {"text_offset", json::array()}};
  if (with_prompt && !chat) {
    // The echoed prompt's tokens first: the first has no logprob.
    const auto& ids = request_.prompts[size_t(prompt_index)];
    const auto& scores = prompt_scores_[size_t(prompt_index)];
    const size_t top_n = size_t(request_.params.logprobs.value_or(0));
    int64_t offset = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      const std::string text = tokenizer_.decode({ids[t]}, /*skip_special=*/false);
      out["tokens"].push_back(text);
      out["text_offset"].push_back(offset);
      offset += int64_t(text.size());
      if (t == 0 || t > scores.size()) {
        out["token_logprobs"].push_back(nullptr);
        out["top_logprobs"].push_back(nullptr);
        continue;
      }
      const SampleResult& s = scores[t - 1];
      json top = json::object();
      for (size_t k = 0; k < std::min(top_n, s.top.size()); ++k)
        top[tokenizer_.decode({s.top[k].token}, false)] = s.top[k].logprob;
      out["token_logprobs"].push_back(s.logprob);
      out["top_logprobs"].push_back(std::move(top));
    }
  }
  for (const SampleResult& s : event.logprobs) {
    const std::string text = tokenizer_.decode({s.token}, /*skip_special=*/false);
    if (chat) {
      auto bytes_of = [&](int32_t id) {
        const std::string b = tokenizer_.token_bytes(id, /*include_special=*/true);
        json arr = json::array();
        for (unsigned char c : b) arr.push_back(int(c));
        return arr;
      };
      json top = json::array();
      for (const TokenLogprob& t : s.top)
        top.push_back({{"token", tokenizer_.decode({t.token}, false)},
                       {"logprob", t.logprob},
                       {"bytes", bytes_of(t.token)}});
      out["content"].push_back({{"token", text},
                                {"logprob", s.logprob},
                                {"bytes", bytes_of(s.token)},
                                {"top_logprobs", std::move(top)}});
    } else {
      json top = json::object();
      for (const TokenLogprob& t : s.top) top[tokenizer_.decode({t.token}, false)] = t.logprob;
      out["tokens"].push_back(text);
      out["token_logprobs"].push_back(s.logprob);
      out["top_logprobs"].push_back(std::move(top));
      out["text_offset"].push_back(choice.text_offset);
      choice.text_offset += int64_t(text.size());
    }
  }
  if (!request_.stream) {
    for (auto& [key, arr] : out.items())
      for (auto& v : arr) choice.logprobs[key].push_back(v);
  }
  return out;
}

std::vector<std::string> ResponseBuilder::on_event(int32_t prompt_index, const StreamEvent& e) {
  std::vector<std::string> chunks;
  const bool chat = request_.endpoint == Endpoint::ChatCompletions;
  if (e.error == EngineErrorKind::None && e.seq_index >= 0 && e.seq_index < request_.params.n) {
    const size_t index = size_t(prompt_index) * size_t(request_.params.n) + size_t(e.seq_index);
    Choice& c = choices_[index];
    completion_tokens_ += int64_t(e.token_ids.size());
    c.tokens.insert(c.tokens.end(), e.token_ids.begin(), e.token_ids.end());
    if (!e.prompt_logprobs.empty()) prompt_scores_[size_t(prompt_index)] = e.prompt_logprobs;
    const bool first_event = !c.seen;
    c.seen = true;
    const bool echo_scores = first_event && request_.echo && request_.logprobs;
    json lp = request_.logprobs && (!e.logprobs.empty() || echo_scores)
                  ? logprobs_json(c, e, prompt_index, echo_scores)
                  : json(nullptr);
    json prompt_lp = first_event && request_.prompt_logprobs ? vllm_prompt_logprobs(prompt_index)
                                                             : json(nullptr);
    if (!request_.stream && !prompt_lp.is_null()) c.prompt_logprobs = prompt_lp;
    const bool finished = e.finish != FinishReason::None;
    // Chat: the text goes through the output parser (reasoning, tool calls).
    OutputDelta parsed;
    if (c.parser) {
      parsed = c.parser->push(e.text);
      if (finished) {
        OutputDelta rest = c.parser->finish();
        parsed.content += rest.content;
        parsed.reasoning += rest.reasoning;
        parsed.tool_calls.insert(parsed.tool_calls.end(), rest.tool_calls.begin(),
                                 rest.tool_calls.end());
      }
    }
    if (finished) {
      c.finish_reason = finish_reason_string(e.finish);
      if (e.finish == FinishReason::Stop && c.parser && !c.parser->tool_calls().empty())
        c.finish_reason = "tool_calls";
    }
    if (request_.stream) {
      std::string text = chat ? parsed.content : e.text;
      if (!c.started && request_.echo) text = request_.prompt_texts[size_t(prompt_index)] + text;
      const bool first = !c.started;
      c.started = true;
      const bool with_content =
          !text.empty() || (first && parsed.reasoning.empty() && parsed.tool_calls.empty());
      if ((!text.empty() || first || finished) && lp.is_null() && prompt_lp.is_null() &&
          parsed.reasoning.empty() && parsed.tool_calls.empty()) {
        chunks.push_back(plain_chunk(index, text, c.finish_reason, chat, first, with_content));
      } else if (!text.empty() || first || finished || !lp.is_null() || !parsed.empty()) {
        json chunk = chunk_base();
        json choice = {{"index", index}, {"logprobs", lp},
                       {"finish_reason", c.finish_reason.empty() ? json(nullptr)
                                                                 : json(c.finish_reason)}};
        if (!prompt_lp.is_null()) choice["prompt_logprobs"] = std::move(prompt_lp);
        if (chat) {
          json delta = json::object();
          if (first) delta["role"] = "assistant";
          if (!parsed.reasoning.empty()) delta["reasoning_content"] = parsed.reasoning;
          if (with_content) delta["content"] = text;
          if (!parsed.tool_calls.empty()) delta["tool_calls"] = tool_call_deltas_json(parsed.tool_calls);
          choice["delta"] = std::move(delta);
        } else {
          choice["text"] = text;
        }
        chunk["choices"].push_back(std::move(choice));
        chunks.push_back(dump(chunk));
      }
    } else if (!chat) {
      c.text += e.text;
    }
  }
  if (e.request_done) ++prompts_done_;
  return chunks;
}

std::string ResponseBuilder::plain_chunk(size_t index, const std::string& text,
                                         const std::string& finish_reason, bool chat, bool first,
                                         bool with_content) const {
  std::string out;
  out.reserve(text.size() + chunk_tail_.size() + 128);
  const std::string fr = finish_reason.empty() ? "null" : dump(json(finish_reason));
  out += "{\"choices\":[{";
  if (chat) {
    out += "\"delta\":{";
    if (with_content) out += "\"content\":" + dump(json(text));
    if (first) out += with_content ? ",\"role\":\"assistant\"" : "\"role\":\"assistant\"";
    out += "},";
  }
  out += "\"finish_reason\":" + fr + ",\"index\":" + std::to_string(index) + ",\"logprobs\":null";
  if (!chat) out += ",\"text\":" + dump(json(text));
  out += "}";
  out += chunk_tail_;
  return out;
}

json ResponseBuilder::vllm_prompt_logprobs(int32_t prompt_index) const {
  const auto& ids = request_.prompts[size_t(prompt_index)];
  const auto& scores = prompt_scores_[size_t(prompt_index)];
  const size_t top_n = size_t(request_.prompt_logprobs.value_or(0));
  json out = json::array({nullptr});
  for (size_t t = 1; t < ids.size(); ++t) {
    if (t > scores.size()) {
      out.push_back(nullptr);
      continue;
    }
    const SampleResult& s = scores[t - 1];
    json entry = json::object();
    for (size_t k = 0; k < std::min(top_n, s.top.size()); ++k)
      entry[std::to_string(s.top[k].token)] = {
          {"logprob", s.top[k].logprob},
          {"rank", k + 1},
          {"decoded_token", tokenizer_.decode({s.top[k].token}, false)}};
    entry[std::to_string(ids[t])] = {{"logprob", s.logprob},
                                     {"rank", s.rank},
                                     {"decoded_token", tokenizer_.decode({ids[t]}, false)}};
    out.push_back(std::move(entry));
  }
  return out;
}

std::string ResponseBuilder::final_body() const {
  const bool chat = request_.endpoint == Endpoint::ChatCompletions;
  json j = {{"id", id_},
            {"object", chat ? "chat.completion" : "text_completion"},
            {"created", created_},
            {"model", request_.model},
            {"choices", json::array()}};
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    json choice = {{"index", i},
                   {"logprobs", request_.logprobs ? c.logprobs : json(nullptr)},
                   {"finish_reason", c.finish_reason.empty() ? json("abort") : json(c.finish_reason)}};
    if (chat) choice["message"] = c.parser->message();
    else choice["text"] = c.text;
    if (request_.prompt_logprobs) choice["prompt_logprobs"] = c.prompt_logprobs;
    j["choices"].push_back(std::move(choice));
  }
  const Usage u = usage();
  j["usage"] = {{"prompt_tokens", u.prompt_tokens},
                {"completion_tokens", u.completion_tokens},
                {"total_tokens", u.total()}};
  return dump(j);
}

std::string ResponseBuilder::usage_chunk() const {
  json j = chunk_base();
  const Usage u = usage();
  j["usage"] = {{"prompt_tokens", u.prompt_tokens},
                {"completion_tokens", u.completion_tokens},
                {"total_tokens", u.total()}};
  return dump(j);
}

}  // namespace loom::server
