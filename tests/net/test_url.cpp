// parse_url: the base URLs `loom router --backends` and `loom bench serve
// --base-url` accept.
#include <gtest/gtest.h>

#include "core/error.h"
#include "net/url.h"

namespace loom::net {
namespace {

TEST(ParseUrl, HostPortAndPath) {
  Url u = parse_url("http://127.0.0.1:8000");
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, "8000");
  EXPECT_EQ(u.base_path, "");

  u = parse_url("http://replica-0.loom.svc");
  EXPECT_EQ(u.host, "replica-0.loom.svc");
  EXPECT_EQ(u.port, "80");  // the default
  EXPECT_EQ(u.base_path, "");

  u = parse_url("http://localhost:9/api/v2//");
  EXPECT_EQ(u.host, "localhost");
  EXPECT_EQ(u.port, "9");
  EXPECT_EQ(u.base_path, "/api/v2");  // trailing slashes dropped

  u = parse_url("http://localhost:8000/");
  EXPECT_EQ(u.base_path, "");
}

TEST(ParseUrl, Ipv6LiteralsInBrackets) {
  Url u = parse_url("http://[::1]:8001/v1");
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.port, "8001");
  EXPECT_EQ(u.base_path, "/v1");
  u = parse_url("http://[fe80::2]");
  EXPECT_EQ(u.host, "fe80::2");
  EXPECT_EQ(u.port, "80");
}

TEST(ParseUrl, RejectsWhatItCannotServe) {
  for (const char* bad : {"https://example.com", "example.com:80", "", "http://", "http://:80",
                          "http://host:", "http://host:80x", "http://host:-1", "ftp://host"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(parse_url(bad), Error);
  }
}

}  // namespace
}  // namespace loom::net
