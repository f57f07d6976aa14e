// Bounded JSON body parsing: nlohmann's SAX parser (iterative) feeding a tree
// builder whose open objects keep a key -> position index.
#include "server/json_body.h"

#include <fmt/format.h>

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/api_error.h"
#include "tokenizer/unicode.h"

namespace loom::server {

namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// Builds an ordered_json from SAX events. Containers are built in place in
// their parent; a parent gets no new element while a child is open, so the
// pointers on the stack stay valid.
class TreeBuilder {
 public:
  explicit TreeBuilder(Clock::time_point deadline) : deadline_(deadline) {}

  bool null() { return add(Json(nullptr)) != nullptr; }
  bool boolean(bool v) { return add(Json(v)) != nullptr; }
  bool number_integer(Json::number_integer_t v) { return add(Json(v)) != nullptr; }
  bool number_unsigned(Json::number_unsigned_t v) { return add(Json(v)) != nullptr; }
  bool number_float(Json::number_float_t v, const std::string&) { return add(Json(v)) != nullptr; }
  bool string(std::string& v) { return add(Json(std::move(v))) != nullptr; }
  bool binary(Json::binary_t&) { return false; }  // not produced by the JSON reader
  bool start_object(size_t) { return open(Json::object()); }
  bool key(std::string& k) {
    key_ = std::move(k);
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(size_t) { return open(Json::array()); }
  bool end_array() { return close(); }
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

  bool timed_out() const { return timed_out_; }
  Json take() { return std::move(root_); }

 private:
  // Objects this small are searched by a scan; larger ones get an index.
  static constexpr size_t kIndexFrom = 16;
  // Events between looks at the clock.
  static constexpr uint32_t kClockEvery = 4096;

  struct Open {
    Json* value;
    std::unordered_map<std::string, size_t> index;  // objects of kIndexFrom keys or more
  };

  // Places v in the open container (or as the root); null when out of time.
  Json* add(Json v) {
    if (++events_ % kClockEvery == 0 && Clock::now() > deadline_) {
      timed_out_ = true;
      return nullptr;
    }
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Open& top = stack_.back();
    if (top.value->is_array()) {
      auto& arr = top.value->get_ref<Json::array_t&>();
      arr.push_back(std::move(v));
      return &arr.back();
    }
    auto& items = static_cast<Json::object_t::Container&>(top.value->get_ref<Json::object_t&>());
    if (auto at = find(top, items)) {
      items[*at].second = std::move(v);
      return &items[*at].second;
    }
    if (!top.index.empty() || items.size() + 1 >= kIndexFrom) {
      if (top.index.empty())
        for (size_t i = 0; i < items.size(); ++i) top.index.emplace(items[i].first, i);
      top.index.emplace(key_, items.size());
    }
    items.emplace_back(std::move(key_), std::move(v));
    return &items.back().second;
  }

  std::optional<size_t> find(const Open& top, const Json::object_t::Container& items) const {
    if (!top.index.empty()) {
      auto it = top.index.find(key_);
      if (it == top.index.end()) return std::nullopt;
      return it->second;
    }
    for (size_t i = 0; i < items.size(); ++i)
      if (items[i].first == key_) return i;
    return std::nullopt;
  }

  bool open(Json empty) {
    Json* v = add(std::move(empty));
    if (!v) return false;
    stack_.push_back({v, {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  Clock::time_point deadline_;
  Json root_;
  std::vector<Open> stack_;
  std::string key_;
  uint32_t events_ = 0;
  bool timed_out_ = false;
};

}  // namespace

int json_nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > deepest) {
          deepest = depth;
          if (deepest > limit) return limit + 1;
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default:
        break;
    }
  }
  return deepest;
}

nlohmann::ordered_json parse_json_body(std::string_view body, size_t max_bytes, int max_depth,
                                       Clock::time_point deadline) {
  if (body.size() > max_bytes)
    throw ApiError(413, fmt::format("request body of {} bytes exceeds the limit of {} bytes",
                                    body.size(), max_bytes));
  if (!tok::utf8_is_valid(body)) throw ApiError(400, "request body is not valid UTF-8");
  if (json_nesting_depth(body, max_depth) > max_depth)
    throw ApiError(400, fmt::format("JSON nesting deeper than {} levels", max_depth));
  TreeBuilder builder(deadline);
  const bool ok = Json::sax_parse(body, &builder, Json::input_format_t::json, /*strict=*/true);
  if (builder.timed_out()) throw ApiError(400, "request body is too complex to parse in time");
  if (!ok) throw ApiError(400, "request body is not valid JSON");
  Json j = builder.take();
  if (!j.is_object()) throw ApiError(400, "request body must be a JSON object");
  return j;
}

std::optional<nlohmann::ordered_json> parse_json_text(std::string_view text, int max_depth) {
  if (json_nesting_depth(text, max_depth) > max_depth) return std::nullopt;
  TreeBuilder builder(Clock::time_point::max());
  if (!Json::sax_parse(text, &builder, Json::input_format_t::json, /*strict=*/true))
    return std::nullopt;
  return builder.take();
}

}  // namespace loom::server
