// Logging through spdlog: one levelled line per event. Never log prompt text.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace loom {

// Sets the level from a name (trace, debug, info, warn, error, off).
void set_log_level(std::string_view level);

// "text": "[time] [logger] [level] message" (spdlog's default); "json": one
// JSON object per line, {"time", "level", "logger", "message"} (time in UTC,
// ISO 8601 with milliseconds), for log collectors. Applies to every logger.
// Throws loom::Error for another name.
void set_log_format(std::string_view format);

}  // namespace loom

#define LOOM_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define LOOM_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define LOOM_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define LOOM_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
