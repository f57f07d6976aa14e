// parse_url; see url.h.
#include "net/url.h"

#include "core/error.h"

namespace loom::net {

Url parse_url(const std::string& text) {
  const std::string scheme = "http://";
  if (text.rfind(scheme, 0) != 0)
    LOOM_THROW("base URL '{}' must start with http:// (https is not supported)", text);
  Url u;
  std::string rest = text.substr(scheme.size());
  const size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  if (slash != std::string::npos) u.base_path = rest.substr(slash);
  while (!u.base_path.empty() && u.base_path.back() == '/') u.base_path.pop_back();
  const size_t colon = hostport.rfind(':');
  const size_t bracket = hostport.rfind(']');  // an IPv6 literal's colons are not the port's
  if (colon != std::string::npos && (bracket == std::string::npos || colon > bracket)) {
    u.port = hostport.substr(colon + 1);
    hostport = hostport.substr(0, colon);
  }
  if (!hostport.empty() && hostport.front() == '[' && hostport.back() == ']')
    hostport = hostport.substr(1, hostport.size() - 2);
  u.host = hostport;
  if (u.host.empty() || u.port.empty() ||
      u.port.find_first_not_of("0123456789") != std::string::npos)
    LOOM_THROW("cannot parse base URL '{}'", text);
  return u;
}

}  // namespace loom::net
