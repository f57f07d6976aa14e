// CORS for browsers calling the API from a page of another origin
// (`loom serve --allowed-origins`): with_cors() wraps the application's
// handler; a preflight (OPTIONS with Access-Control-Request-Method) from an
// allowed origin is answered here (204 with the allowed methods and headers),
// from any other origin with 403; every other response to an allowed Origin
// carries Access-Control-Allow-Origin. No origins configured: requests pass
// through untouched (no CORS headers; OPTIONS gets the app's 405).
#pragma once

#include <string>
#include <vector>

#include "server/http_types.h"

namespace loom::server {

struct CorsConfig {
  std::vector<std::string> allowed_origins;  // exact origins ("https://app.example.com"), or "*"
  std::vector<std::string> allowed_methods = {"GET", "POST", "OPTIONS"};
  std::vector<std::string> allowed_headers = {"Authorization", "Content-Type", "X-Api-Key",
                                              "Anthropic-Version", "OpenAI-Beta"};
  bool allow_credentials = false;
  int max_age_seconds = 600;
};

// Whether `origin` is allowed by `config`.
bool cors_allows(const CorsConfig& config, const std::string& origin);

RequestHandler with_cors(CorsConfig config, RequestHandler inner);

}  // namespace loom::server
