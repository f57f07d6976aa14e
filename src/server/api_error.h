// ApiError: a failure at the HTTP boundary, carrying the status code and the
// OpenAI-style error body fields. Thrown by request parsing and validation,
// caught by the router, never past it.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace loom::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = "",
           std::string type = "invalid_request_error")
      : std::runtime_error(std::move(message)),
        status_(status),
        param_(std::move(param)),
        type_(std::move(type)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }  // "" when no single field is at fault
  const std::string& type() const { return type_; }
  // 429 / 503: seconds the client should wait (Retry-After); 0: none.
  int64_t retry_after() const { return retry_after_; }
  ApiError&& with_retry_after(int64_t seconds) && {
    retry_after_ = seconds;
    return std::move(*this);
  }

 private:
  int status_;
  std::string param_;
  std::string type_;
  int64_t retry_after_ = 0;
};

// 400 invalid_request_error naming `param`.
[[noreturn]] void throw_bad_field(const std::string& param, const std::string& message);

// {"error": {"message", "type", "param", "code": null}} (param null when empty).
std::string error_body(const std::string& message, const std::string& type,
                       const std::string& param);
std::string error_body(const ApiError& e);
// The OpenAI error type for a status without a more specific one.
const char* error_type_for_status(int status);

}  // namespace loom::server
