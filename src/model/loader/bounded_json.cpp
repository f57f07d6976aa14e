#include "model/loader/bounded_json.h"

#include <set>
#include <vector>

#include "core/error.h"

namespace loom {

nlohmann::json parse_bounded_json(std::string_view text, const std::string& label, JsonLimits limits) {
  using json = nlohmann::json;
  std::vector<std::set<std::string>> keys;  // keys seen, per open object
  int open = 0;
  size_t values = 0;
  auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (++open > limits.max_depth)
          LOOM_THROW("{}: JSON nests deeper than {} levels", label, limits.max_depth);
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        keys.pop_back();
        --open;
        break;
      case json::parse_event_t::array_end:
        --open;
        break;
      case json::parse_event_t::key:
        if (++values > limits.max_values)
          LOOM_THROW("{}: JSON has more than {} values", label, limits.max_values);
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second)
          LOOM_THROW("{}: duplicate JSON key '{}'", label, parsed.get<std::string>());
        break;
      case json::parse_event_t::value:
        if (++values > limits.max_values)
          LOOM_THROW("{}: JSON has more than {} values", label, limits.max_values);
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {
    LOOM_THROW("{}: invalid JSON: {}", label, e.what());
  }
}

}  // namespace loom
