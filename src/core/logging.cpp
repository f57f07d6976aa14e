#include "core/logging.h"

#include <string>

namespace loom {

void set_log_level(std::string_view level) {
  spdlog::set_level(spdlog::level::from_str(std::string(level)));
  spdlog::set_default_logger(spdlog::default_logger());
}

}  // namespace loom
