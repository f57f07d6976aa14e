#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>

#include "cli.h"
#include "core/error.h"

namespace loom::cli {

int guarded(const char* name, const std::function<int()>& body) {
  try {
    return body();
  } catch (const CLI::ParseError&) {
    throw;  // handled by the caller's CLI11 app
  } catch (const Error& e) {
    std::fprintf(stderr, "loom %s: error: %s\n", name, e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom %s: error: %s\n", name, e.what());
  }
  return 1;
}

std::string read_stdin() {
  std::ostringstream ss;
  ss << std::cin.rdbuf();
  return ss.str();
}

std::vector<int32_t> parse_id_list(const std::string& text) {
  std::vector<int32_t> ids;
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_array()) LOOM_THROW("expected a JSON array of token ids");
    for (const auto& v : j) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
        LOOM_THROW("token id {} is not a non-negative integer", v.dump());
      ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
    return ids;
  }
  std::string cur;
  auto flush = [&] {
    if (cur.empty()) return;
    size_t pos = 0;
    long long v = -1;
    try {
      v = std::stoll(cur, &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    if (pos != cur.size() || v < 0 || v > INT32_MAX) LOOM_THROW("'{}' is not a token id", cur);
    ids.push_back(static_cast<int32_t>(v));
    cur.clear();
  };
  for (char c : text) {
    if (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r') flush();
    else cur += c;
  }
  flush();
  return ids;
}

}  // namespace loom::cli
