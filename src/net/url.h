// Base URLs of HTTP servers (replicas behind the router, the server a
// benchmark drives): "http://host[:port][/path]". Pure parsing, no I/O.
#pragma once

#include <string>

namespace loom::net {

struct Url {
  std::string host;
  std::string port = "80";
  std::string base_path;  // without a trailing '/', "" for the root
};
// "http://host[:port][/path]"; throws loom::Error otherwise.
Url parse_url(const std::string& url);

}  // namespace loom::net
