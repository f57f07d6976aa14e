// parse_prometheus; see prometheus_text.h.
#include "net/prometheus_text.h"

#include <limits>
#include <sstream>

namespace loom::net {

std::vector<PromSample> parse_prometheus(const std::string& text) {
  std::vector<PromSample> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    PromSample s;
    size_t pos = start;
    while (pos < line.size() && line[pos] != '{' && line[pos] != ' ' && line[pos] != '\t') ++pos;
    s.name = line.substr(start, pos - start);
    if (s.name.empty()) continue;
    if (pos < line.size() && line[pos] == '{') {
      // Label values may hold '}' inside quotes.
      bool quoted = false, escaped = false;
      size_t end = pos + 1;
      for (; end < line.size(); ++end) {
        const char c = line[end];
        if (escaped)
          escaped = false;
        else if (c == '\\')
          escaped = true;
        else if (c == '"')
          quoted = !quoted;
        else if (c == '}' && !quoted)
          break;
      }
      if (end >= line.size()) continue;
      s.labels = line.substr(pos + 1, end - pos - 1);
      pos = end + 1;
    }
    std::istringstream rest(line.substr(pos));
    std::string value;
    if (!(rest >> value)) continue;
    try {
      size_t used = 0;
      if (value == "+Inf")
        s.value = std::numeric_limits<double>::infinity();
      else if (value == "-Inf")
        s.value = -std::numeric_limits<double>::infinity();
      else if (value == "NaN")
        s.value = std::numeric_limits<double>::quiet_NaN();
      else {
        s.value = std::stod(value, &used);
        if (used != value.size()) continue;
      }
    } catch (const std::exception&) {
      continue;
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace loom::net
