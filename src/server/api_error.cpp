// OpenAI-style error bodies.
#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace loom::server {

void throw_bad_field(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

std::string error_body(const std::string& message, const std::string& type,
                       const std::string& param) {
  nlohmann::json err = {{"message", message},
                        {"type", type},
                        {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
                        {"code", nullptr}};
  // Messages may quote client bytes: never emit invalid UTF-8.
  return nlohmann::json{{"error", std::move(err)}}.dump(-1, ' ', false,
                                                        nlohmann::json::error_handler_t::replace);
}

std::string error_body(const ApiError& e) { return error_body(e.what(), e.type(), e.param()); }

const char* error_type_for_status(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

}  // namespace loom::server
