#include "report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>

#include "step_profile_report.h"

namespace loom::bench {

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const double idx = q * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(idx);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
  };
  p.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  p.p50 = at(0.5);
  p.p90 = at(0.9);
  p.p99 = at(0.99);
  p.max = v.back();
  return p;
}

nlohmann::json to_json(const Percentiles& p) {
  auto r = [](double x) { return std::round(x * 1000.0) / 1000.0; };
  return {{"mean", r(p.mean)}, {"p50", r(p.p50)}, {"p90", r(p.p90)}, {"p99", r(p.p99)}, {"max", r(p.max)}};
}

int64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) {
      std::istringstream ss(line.substr(6));
      int64_t kb = 0;
      ss >> kb;
      return kb * 1024;
    }
  return 0;
}

namespace {

void rows(const nlohmann::json& j, const std::string& prefix, std::vector<std::pair<std::string, std::string>>& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object()) {
      rows(*it, key, out);
    } else if (it->is_array()) {
      continue;  // per-run arrays stay in the JSON only
    } else {
      out.emplace_back(key, it->is_string() ? it->get<std::string>() : it->dump());
    }
  }
}

}  // namespace

void print_report(const nlohmann::json& report, bool json_only) {
  std::printf("%s\n", report.dump().c_str());
  if (json_only) return;
  std::vector<std::pair<std::string, std::string>> r;
  nlohmann::json scalars = report;
  if (scalars.is_object()) scalars.erase("step_profile");  // tables of its own
  rows(scalars, "", r);
  std::printf("\n| metric | value |\n| --- | --- |\n");
  for (const auto& [k, v] : r) std::printf("| %s | %s |\n", k.c_str(), v.c_str());
  if (report.is_object() && report.contains("step_profile"))
    print_step_profile_tables(report["step_profile"]);
}

}  // namespace loom::bench
