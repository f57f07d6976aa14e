#include "core/logging.h"

#include <spdlog/pattern_formatter.h>

#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"

namespace loom {

namespace {

// One JSON object per record; the message is escaped by nlohmann::json
// (invalid UTF-8 replaced, so a line always parses).
class JsonFormatter : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const auto since_epoch = msg.time.time_since_epoch();
    const auto secs = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
    const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch - secs);
    const std::time_t t = secs.count();
    std::tm tm{};
    gmtime_r(&t, &tm);
    char stamp[40];
    const size_t n = std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    std::snprintf(stamp + n, sizeof stamp - n, ".%03dZ", int(millis.count()));
    const auto level = spdlog::level::to_string_view(msg.level);
    nlohmann::json line{{"time", stamp},
                        {"level", std::string(level.data(), level.size())},
                        {"logger", std::string(msg.logger_name.data(), msg.logger_name.size())},
                        {"message", std::string(msg.payload.data(), msg.payload.size())}};
    const std::string text =
        line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    dest.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

}  // namespace

void set_log_level(std::string_view level) {
  spdlog::set_level(spdlog::level::from_str(std::string(level)));
  spdlog::set_default_logger(spdlog::default_logger());
}

void set_log_format(std::string_view format) {
  if (format == "json") {
    spdlog::set_formatter(std::make_unique<JsonFormatter>());
  } else if (format == "text") {
    spdlog::set_formatter(std::make_unique<spdlog::pattern_formatter>());
  } else {
    LOOM_THROW("unknown log format '{}' (text or json)", format);
  }
}

}  // namespace loom
