// Parsing and validating OpenAI generation request bodies. Field names,
// defaults and ranges follow the OpenAI API reference (and vLLM's extensions:
// top_k, min_p, repetition_penalty, min_tokens, ignore_eos, stop_token_ids,
// priority). Every check happens before anything is allocated from the value.
#include "server/openai_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "server/api_error.h"
#include "server/json_body.h"
#include "server/strict_fields.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace loom::server {

using json = nlohmann::ordered_json;  // request bodies keep their key order

std::vector<std::string> ModelContext::served_names() const {
  std::vector<std::string> out{name};
  out.insert(out.end(), aliases.begin(), aliases.end());
  return out;
}

bool ModelContext::serves(const std::string& id) const {
  if (name.empty() || id == name) return true;
  return std::find(aliases.begin(), aliases.end(), id) != aliases.end();
}

int64_t GenerationRequest::prompt_tokens() const {
  int64_t total = 0;
  for (const auto& p : prompts) total += int64_t(p.size());
  return total;
}

namespace {

// The field's value, or null when absent or JSON null.
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

bool get_bool(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_boolean()) throw_bad_field(name, fmt::format("'{}' must be a boolean", name));
  return v->get<bool>();
}

// An integer in [lo, hi]; floats (even integral ones) and huge values are errors.
int64_t to_int(const json& v, const std::string& name, int64_t lo, int64_t hi) {
  if (!v.is_number_integer())
    throw_bad_field(name, fmt::format("'{}' must be an integer", name));
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(hi) || (lo > 0 && u < uint64_t(lo)))
      throw_bad_field(name, fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, u));
    return int64_t(u);
  }
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    throw_bad_field(name, fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, x));
  return x;
}

std::optional<int64_t> get_int(const json& body, const char* name, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  return to_int(*v, name, lo, hi);
}

// A finite number in [lo, hi] (open at lo when lo_open).
std::optional<double> get_number(const json& body, const char* name, double lo, double hi,
                                 bool lo_open = false) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw_bad_field(name, fmt::format("'{}' must be a number", name));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
    throw_bad_field(name, fmt::format("'{}' must be in {}{}, {}], got {}", name,
                                      lo_open ? "(" : "[", lo, hi, v->dump()));
  return x;
}

std::vector<int32_t> token_ids(const json& arr, const std::string& name, const ModelContext& model) {
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (const auto& t : arr) ids.push_back(int32_t(to_int(t, name, 0, model.vocab_size - 1)));
  return ids;
}

bool all_of_type(const json& arr, json::value_t type) {
  for (const auto& v : arr) {
    const bool ok = type == json::value_t::number_integer ? v.is_number_integer()
                                                          : v.type() == type;
    if (!ok) return false;
  }
  return true;
}

void parse_completion_prompt(const json& body, const ModelContext& model,
                             const RequestLimits& limits, GenerationRequest& out) {
  const json* p = field(body, "prompt");
  if (!p) throw_bad_field("prompt", "'prompt' is required");
  const Tokenizer& tok = *model.tokenizer;
  auto add_text = [&](const std::string& text) {
    out.prompts.push_back(tok.encode(text, /*add_special=*/true, /*parse_special=*/true));
    out.prompt_texts.push_back(text);
  };
  auto add_ids = [&](std::vector<int32_t> ids) {
    out.prompt_texts.push_back(tok.decode(ids, /*skip_special=*/false));
    out.prompts.push_back(std::move(ids));
  };
  if (p->is_string()) {
    add_text(p->get<std::string>());
  } else if (p->is_array()) {
    if (p->empty()) throw_bad_field("prompt", "'prompt' must not be empty");
    if (all_of_type(*p, json::value_t::number_integer)) {
      add_ids(token_ids(*p, "prompt", model));
    } else {
      if (int64_t(p->size()) > limits.max_prompts)
        throw_bad_field("prompt", fmt::format("at most {} prompts per request, got {}",
                                              limits.max_prompts, p->size()));
      if (all_of_type(*p, json::value_t::string)) {
        for (const auto& s : *p) add_text(s.get<std::string>());
      } else if (all_of_type(*p, json::value_t::array)) {
        for (const auto& ids : *p) {
          if (ids.empty() || !all_of_type(ids, json::value_t::number_integer))
            throw_bad_field("prompt", "each token-id prompt must be a non-empty list of integers");
          add_ids(token_ids(ids, "prompt", model));
        }
      } else {
        throw_bad_field("prompt",
                        "'prompt' must be a string, a list of strings, a list of token ids or a "
                        "list of token-id lists");
      }
    }
  } else {
    throw_bad_field("prompt", "'prompt' must be a string or a list");
  }
}

// Assistant messages carry tool_calls[].function.arguments as JSON text (the
// OpenAI shape); chat templates expect the object (as vLLM and HF pass it).
json with_tool_call_arguments_as_objects(const json& messages) {
  json out = messages;
  for (auto& m : out) {
    if (!m.is_object() || !m.contains("tool_calls") || !m["tool_calls"].is_array()) continue;
    for (auto& call : m["tool_calls"]) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
      auto& fn = call["function"];
      if (fn.contains("arguments") && fn["arguments"].is_string()) {
        if (auto args = parse_json_text(fn["arguments"].get<std::string>()))
          fn["arguments"] = std::move(*args);
      }
    }
  }
  return out;
}

void parse_chat_prompt(const json& body, const ModelContext& model, const RequestLimits& limits,
                       GenerationRequest& out) {
  const json* m = field(body, "messages");
  if (!m) throw_bad_field("messages", "'messages' is required");
  if (!m->is_array() || m->empty())
    throw_bad_field("messages", "'messages' must be a non-empty list");
  if (int64_t(m->size()) > limits.max_messages)
    throw_bad_field("messages", fmt::format("at most {} messages, got {}", limits.max_messages,
                                            m->size()));
  if (!model.chat) throw ApiError(400, "this model has no chat template; use /v1/completions",
                                  "messages");
  json extra = json::object();
  if (const json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object())
      throw_bad_field("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    extra = *kw;
  }
  if (out.structure.tools.active()) extra["tools"] = *field(body, "tools");
  // As vLLM: templates that read reasoning_effort see it (checked in strict_fields.cpp).
  if (const json* effort = field(body, "reasoning_effort")) extra["reasoning_effort"] = *effort;
  const bool add_generation_prompt = get_bool(body, "add_generation_prompt", true);
  std::string text;
  try {
    // render() normalises
    text = model.chat->render(with_tool_call_arguments_as_objects(*m), add_generation_prompt, extra);
  } catch (const ApiError&) {
    throw;
  } catch (const std::exception& e) {
    throw_bad_field("messages", e.what());
  }
  out.prompts.push_back(model.tokenizer->encode(text, /*add_special=*/false, /*parse_special=*/true));
  out.prompt_texts.push_back(std::move(text));
}

void parse_stop(const json& body, const RequestLimits& limits, SamplingParams& params) {
  const json* s = field(body, "stop");
  if (!s) return;
  auto add = [&](const json& v) {
    if (!v.is_string()) throw_bad_field("stop", "'stop' must be a string or a list of strings");
    const auto& str = v.get_ref<const std::string&>();
    if (str.empty()) throw_bad_field("stop", "stop strings must not be empty");
    if (str.size() > limits.max_stop_bytes)
      throw_bad_field("stop", fmt::format("stop strings are at most {} bytes, got {}",
                                          limits.max_stop_bytes, str.size()));
    params.stop.push_back(str);
  };
  if (s->is_array()) {
    if (int64_t(s->size()) > limits.max_stop)
      throw_bad_field("stop", fmt::format("at most {} stop strings, got {}", limits.max_stop,
                                          s->size()));
    for (const auto& v : *s) add(v);
  } else {
    add(*s);
  }
}

void parse_logit_bias(const json& body, const ModelContext& model, const RequestLimits& limits,
                      SamplingParams& params) {
  const json* lb = field(body, "logit_bias");
  if (!lb) return;
  if (!lb->is_object())
    throw_bad_field("logit_bias", "'logit_bias' must be an object of token id -> bias");
  if (int64_t(lb->size()) > limits.max_logit_bias)
    throw_bad_field("logit_bias", fmt::format("at most {} logit_bias entries, got {}",
                                              limits.max_logit_bias, lb->size()));
  for (const auto& [key, value] : lb->items()) {
    int64_t id = -1;
    const char* end = key.data() + key.size();
    auto [ptr, ec] = std::from_chars(key.data(), end, id);
    if (ec != std::errc() || ptr != end || id < 0 || id >= model.vocab_size)
      throw_bad_field("logit_bias", fmt::format("logit_bias key '{}' is not a token id of this "
                                                "model (vocabulary size {})",
                                                key.substr(0, 32), model.vocab_size));
    if (!value.is_number() || !std::isfinite(value.get<double>()) ||
        std::fabs(value.get<double>()) > 100.0)
      throw_bad_field("logit_bias", fmt::format("logit_bias for token {} must be a number in "
                                                "[-100, 100]", id));
    params.logit_bias[int32_t(id)] = float(value.get<double>());
  }
}

}  // namespace

GenerationRequest parse_generation_request(Endpoint endpoint, const json& body,
                                           const ModelContext& model, const RequestLimits& limits) {
  LOOM_CHECK(model.tokenizer != nullptr, "model context without a tokenizer");
  check_strict_fields(endpoint, body);
  GenerationRequest out;
  out.endpoint = endpoint;
  const bool chat = endpoint == Endpoint::ChatCompletions;

  if (const json* m = field(body, "model")) {
    if (!m->is_string()) throw_bad_field("model", "'model' must be a string");
    const auto& name = m->get_ref<const std::string&>();
    if (!model.serves(name))
      throw ApiError(404, fmt::format("The model '{}' does not exist", name.substr(0, 256)),
                     "model");
  }
  // Responses report the id the request named (one of the served names).
  out.model = field(body, "model") ? field(body, "model")->get<std::string>() : model.name;

  // Scalars first: cheap checks before any tokenisation.
  SamplingParams& p = out.params;
  p.n = int32_t(get_int(body, "n", 1, limits.max_n).value_or(1));
  p.temperature = float(get_number(body, "temperature", 0.0, 100.0).value_or(1.0));
  p.top_p = float(get_number(body, "top_p", 0.0, 1.0, /*lo_open=*/true).value_or(1.0));
  p.top_k = int32_t(get_int(body, "top_k", -1, std::numeric_limits<int32_t>::max()).value_or(0));
  p.min_p = float(get_number(body, "min_p", 0.0, 1.0).value_or(0.0));
  p.presence_penalty = float(get_number(body, "presence_penalty", -2.0, 2.0).value_or(0.0));
  p.frequency_penalty = float(get_number(body, "frequency_penalty", -2.0, 2.0).value_or(0.0));
  p.repetition_penalty =
      float(get_number(body, "repetition_penalty", 0.0, 100.0, /*lo_open=*/true).value_or(1.0));
  if (auto seed = get_int(body, "seed", std::numeric_limits<int64_t>::min(),
                          std::numeric_limits<int64_t>::max()))
    p.seed = uint64_t(*seed);
  p.ignore_eos = get_bool(body, "ignore_eos", false);
  p.skip_special_tokens = get_bool(body, "skip_special_tokens", true);
  p.include_stop_str_in_output = get_bool(body, "include_stop_str_in_output", false);
  parse_stop(body, limits, p);
  parse_logit_bias(body, model, limits, p);
  if (const json* ids = field(body, "stop_token_ids")) {
    if (!ids->is_array()) throw_bad_field("stop_token_ids", "'stop_token_ids' must be a list");
    if (int64_t(ids->size()) > limits.max_stop)
      throw_bad_field("stop_token_ids", fmt::format("at most {} stop_token_ids", limits.max_stop));
    p.stop_token_ids = token_ids(*ids, "stop_token_ids", model);
  }

  if (chat) {
    out.logprobs = get_bool(body, "logprobs", false);
    if (auto top = get_int(body, "top_logprobs", 0, limits.max_logprobs)) {
      if (!out.logprobs) throw_bad_field("top_logprobs", "'top_logprobs' needs 'logprobs': true");
      p.logprobs = int32_t(*top);
    } else if (out.logprobs) {
      p.logprobs = 0;
    }
  } else {
    if (auto lp = get_int(body, "logprobs", 0, limits.max_logprobs)) {
      out.logprobs = true;
      p.logprobs = int32_t(*lp);
    }
    out.echo = get_bool(body, "echo", false);
    // echo + logprobs: the prompt's tokens come with their logprobs too.
    if (out.echo && out.logprobs) p.prompt_logprobs = p.logprobs;
  }
  if (auto plp = get_int(body, "prompt_logprobs", 0, limits.max_logprobs)) {
    out.prompt_logprobs = int32_t(*plp);
    p.prompt_logprobs = std::max(p.prompt_logprobs.value_or(0), int32_t(*plp));
  }

  out.stream = get_bool(body, "stream", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) throw_bad_field("stream_options", "'stream_options' must be an object");
    if (!out.stream)
      throw_bad_field("stream_options", "'stream_options' is only allowed when 'stream' is true");
    out.include_usage = get_bool(*so, "include_usage", false);
  }
  if (const json* u = field(body, "user")) {
    if (!u->is_string()) throw_bad_field("user", "'user' must be a string");
    if (u->get_ref<const std::string&>().size() > limits.max_user_bytes)
      throw_bad_field("user", fmt::format("'user' is at most {} bytes", limits.max_user_bytes));
    out.user = u->get<std::string>();
  }
  out.priority = int32_t(get_int(body, "priority", -1000000, 1000000).value_or(0));

  // max_tokens: chat prefers max_completion_tokens; absent means "what fits"
  // for chat and 16 for completions (OpenAI's defaults).
  std::optional<int64_t> max_tokens;
  const char* max_tokens_param = "max_tokens";
  if (chat) {
    if ((max_tokens = get_int(body, "max_completion_tokens", 1, limits.max_tokens)))
      max_tokens_param = "max_completion_tokens";
  }
  // max_tokens 0 (OpenAI's echo; a scored prompt): the prompt alone.
  const bool prompt_only_ok = (!chat && out.echo) || out.prompt_logprobs.has_value();
  if (!max_tokens)
    max_tokens = get_int(body, "max_tokens", prompt_only_ok ? 0 : 1, limits.max_tokens);
  const int64_t min_tokens = get_int(body, "min_tokens", 0, limits.max_tokens).value_or(0);

  out.structure = parse_output_structure(body, chat, model.spec_limits);
  if (chat) parse_chat_prompt(body, model, limits, out);
  else parse_completion_prompt(body, model, limits, out);
  if (chat) {
    if (out.structure.tools.active()) {
      out.tool_parser = model.tool_format;
      // A marker that is a special token of this vocabulary (Mistral's
      // [TOOL_CALLS]) must reach the parser: the output keeps special tokens
      // (stop tokens never enter the text), as vLLM's Mistral parser does.
      const std::string& marker = model.tool_format.start;
      if (!marker.empty())
        if (auto id = model.tokenizer->token_id(marker); id && model.tokenizer->is_special(*id))
          p.skip_special_tokens = false;
    }
    if (model.reasoning) {
      out.reasoning = model.reasoning;
      // The template opened the section (e.g. it ends with "<think>\n").
      const std::string& prompt = out.prompt_texts.front();
      const size_t last = prompt.find_last_not_of(" \n\t\r");
      const std::string& start = model.reasoning->start;
      out.reasoning_started = last != std::string::npos && last + 1 >= start.size() &&
                              prompt.compare(last + 1 - start.size(), start.size(), start) == 0;
    }
  }

  if (int64_t(out.prompts.size()) * p.n > limits.max_choices)
    throw_bad_field("n", fmt::format("prompts x n is at most {}, got {}", limits.max_choices,
                                     int64_t(out.prompts.size()) * p.n));
  const char* prompt_param = chat ? "messages" : "prompt";
  int64_t longest = 0;
  for (const auto& ids : out.prompts) {
    if (ids.empty()) throw_bad_field(prompt_param, "the prompt is empty");
    longest = std::max<int64_t>(longest, int64_t(ids.size()));
  }
  if (longest >= model.max_model_len)
    throw_bad_field(prompt_param,
                    fmt::format("the prompt has {} tokens; this model's context is {} tokens",
                                longest, model.max_model_len));
  const int64_t room = model.max_model_len - longest;
  if (!max_tokens) max_tokens = chat ? std::min<int64_t>(room, limits.max_tokens) : 16;
  if (*max_tokens > room)
    throw_bad_field(max_tokens_param,
                    fmt::format("{} tokens of prompt + {} = {} exceeds this model's context of {} "
                                "tokens", longest, *max_tokens, longest + *max_tokens,
                                model.max_model_len));
  p.max_tokens = int32_t(*max_tokens);
  // The engine ends a max_tokens 0 sequence once its prompt is scored.
  if (p.max_tokens == 0 && !p.prompt_logprobs) p.prompt_logprobs = 0;
  if (min_tokens > p.max_tokens)
    throw_bad_field("min_tokens", fmt::format("'min_tokens' ({}) exceeds max_tokens ({})",
                                              min_tokens, p.max_tokens));
  p.min_tokens = int32_t(min_tokens);

  try {  // the engine's own checks, as a backstop
    p.validate(model.vocab_size);
  } catch (const loom::Error& e) {
    throw ApiError(400, e.what());
  }
  return out;
}

GenerationRequest parse_completion_request(std::string_view body, const ModelContext& model,
                                           const RequestLimits& limits) {
  return parse_generation_request(
      Endpoint::Completions, parse_json_body(body, limits.max_body_bytes, limits.max_json_depth),
      model, limits);
}

GenerationRequest parse_chat_request(std::string_view body, const ModelContext& model,
                                     const RequestLimits& limits) {
  return parse_generation_request(
      Endpoint::ChatCompletions,
      parse_json_body(body, limits.max_body_bytes, limits.max_json_depth), model, limits);
}

}  // namespace loom::server
