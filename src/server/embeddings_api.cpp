// /v1/embeddings bodies in and out (embeddings_api.h).
#include "server/embeddings_api.h"

#include <fmt/format.h>

#include <bit>
#include <cstring>

#include "server/api_error.h"
#include "tokenizer/tokenizer.h"

namespace loom::server {

using json = nlohmann::ordered_json;

namespace {

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

int64_t get_int(const json& body, const char* name, int64_t lo, int64_t hi, int64_t fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number_integer()) throw_bad_field(name, fmt::format("'{}' must be an integer", name));
  if (v->is_number_unsigned() ? v->get<uint64_t>() > uint64_t(hi)
                              : (v->get<int64_t>() < lo || v->get<int64_t>() > hi))
    throw_bad_field(name, fmt::format("'{}' must be in [{}, {}]", name, lo, hi));
  return v->get<int64_t>();
}

std::vector<int32_t> token_ids(const json& list, const ModelContext& model,
                               const std::string& where) {
  std::vector<int32_t> ids;
  ids.reserve(list.size());
  for (const json& t : list) {
    if (!t.is_number_integer() ||
        (t.is_number_unsigned() ? t.get<uint64_t>() >= uint64_t(model.vocab_size)
                                : (t.get<int64_t>() < 0 || t.get<int64_t>() >= model.vocab_size)))
      throw_bad_field("input", fmt::format("{}: token ids must be integers in [0, {})", where,
                                           model.vocab_size));
    ids.push_back(int32_t(t.get<int64_t>()));
  }
  return ids;
}

}  // namespace

int64_t EmbeddingRequest::prompt_tokens() const {
  int64_t n = 0;
  for (const auto& p : inputs) n += int64_t(p.size());
  return n;
}

EmbeddingRequest parse_embedding_request(const json& body, const ModelContext& model,
                                         const RequestLimits& limits) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  EmbeddingRequest out;
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) throw_bad_field("model", "'model' must be a string");
    if (!model.serves(m->get<std::string>()))
      throw ApiError(
          404, fmt::format("The model '{}' does not exist", m->get<std::string>().substr(0, 256)),
          "model", "not_found_error");
    out.model = m->get<std::string>();
  } else {
    out.model = model.name;
  }
  if (const json* d = field(body, "dimensions")) {
    if (!d->is_number_integer()) throw_bad_field("dimensions", "'dimensions' must be an integer");
    throw_bad_field(
        "dimensions",
        "this model does not support Matryoshka representations: 'dimensions' cannot change the "
        "embedding size; leave it out");
  }
  if (const json* f = field(body, "encoding_format")) {
    if (!f->is_string() || (*f != "float" && *f != "base64"))
      throw_bad_field("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
    out.base64 = *f == "base64";
  }
  if (const json* u = field(body, "user")) {
    if (!u->is_string()) throw_bad_field("user", "'user' must be a string");
    if (u->get_ref<const std::string&>().size() > limits.max_user_bytes)
      throw_bad_field("user", fmt::format("'user' is at most {} bytes", limits.max_user_bytes));
    out.user = u->get<std::string>();
  }
  out.normalize = get_bool(body, "normalize", true);
  out.priority = int32_t(get_int(body, "priority", -1000000, 1000000, 0));
  const bool add_special = get_bool(body, "add_special_tokens", true);
  const int64_t truncate = get_int(body, "truncate_prompt_tokens", -1, INT32_MAX, 0);
  if (truncate == 0 && field(body, "truncate_prompt_tokens"))
    throw_bad_field("truncate_prompt_tokens",
                    "'truncate_prompt_tokens' must be -1 (the context) or at least 1");

  const json* input = field(body, "input");
  if (!input)
    throw_bad_field("input", "'input' is required: a string, a list of strings or of token ids");
  // The list of inputs: a lone string or token-id list is one input.
  json one = json::array();
  const json* items = input;
  if (input->is_string() || (input->is_array() && !input->empty() && input->front().is_number())) {
    one.push_back(*input);
    items = &one;
  } else if (!input->is_array()) {
    throw_bad_field("input", "'input' must be a string, a list of strings or of token ids");
  }
  if (items->empty()) throw_bad_field("input", "'input' must not be empty");
  if (int64_t(items->size()) > limits.max_embedding_inputs)
    throw_bad_field("input", fmt::format("'input' has {} entries; at most {}", items->size(),
                                         limits.max_embedding_inputs));
  const int64_t context = model.max_model_len > 0 ? model.max_model_len : INT32_MAX;
  const int64_t keep = truncate < 0 ? context : truncate;
  int64_t total = 0;
  for (size_t i = 0; i < items->size(); ++i) {
    const json& item = (*items)[i];
    const std::string where = fmt::format("input[{}]", i);
    std::vector<int32_t> ids;
    if (item.is_string()) {
      ids = model.tokenizer->encode(item.get_ref<const std::string&>(), add_special, true);
    } else if (item.is_array() && (item.empty() || item.front().is_number())) {
      ids = token_ids(item, model, where);
    } else {
      throw_bad_field(
          "input",
          fmt::format("{} must be a string or a list of token ids, all entries alike", where));
    }
    if (i > 0 && item.is_string() != (*items)[0].is_string())
      throw_bad_field("input", "'input' mixes strings and token ids");
    if (ids.empty()) throw_bad_field("input", fmt::format("{} is empty (no tokens)", where));
    if (truncate != 0 && int64_t(ids.size()) > keep) ids.erase(ids.begin(), ids.end() - keep);
    if (int64_t(ids.size()) > context)
      throw_bad_field(
          "input",
          fmt::format("{} has {} tokens; the model's context is {} (truncate_prompt_tokens can "
                      "cut it)",
                      where, ids.size(), context));
    total += int64_t(ids.size());
    if (total > limits.max_embedding_tokens)
      throw_bad_field("input", fmt::format("'input' has more than {} tokens in all",
                                           limits.max_embedding_tokens));
    out.inputs.push_back(std::move(ids));
  }
  return out;
}

std::string base64_floats(const std::vector<float>& v) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  static_assert(std::endian::native == std::endian::little,
                "base64 embeddings are little-endian float32");
  std::string bytes(v.size() * sizeof(float), '\0');
  if (!v.empty()) std::memcpy(bytes.data(), v.data(), bytes.size());
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t chunk = 0;
    for (size_t k = 0; k < 3; ++k)
      chunk = (chunk << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k)
      out.push_back(k <= n ? kAlphabet[(chunk >> (18 - 6 * k)) & 63] : '=');
  }
  return out;
}

std::string embedding_response_body(const EmbeddingRequest& request,
                                    const std::vector<std::vector<float>>& vectors) {
  json data = json::array();
  for (size_t i = 0; i < vectors.size(); ++i) {
    json item = {{"object", "embedding"}, {"index", i}};
    if (request.base64)
      item["embedding"] = base64_floats(vectors[i]);
    else
      item["embedding"] = vectors[i];
    data.push_back(std::move(item));
  }
  const int64_t tokens = request.prompt_tokens();
  const json body = {{"object", "list"},
                     {"data", std::move(data)},
                     {"model", request.model},
                     {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace loom::server
