// Pure pieces of `loom bench serve --json-schema`: the constraining request
// field and quantiles of the server's mask-time histogram between scrapes.
#include "serve_structured.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace loom::bench {

nlohmann::json json_schema_format(const nlohmann::json& schema, const std::string& nonce) {
  nlohmann::json s = schema;
  if (!nonce.empty() && s.is_object()) s["title"] = "bench " + nonce;
  return {{"type", "json_schema"}, {"json_schema", {{"name", "bench"}, {"schema", std::move(s)}}}};
}

namespace {

// The value of label `key` in a raw label text (`le="0.5",x="y"`), "" if none.
std::string label_value(const std::string& labels, const std::string& key) {
  const std::string needle = key + "=\"";
  size_t at = labels.find(needle);
  if (at == std::string::npos) return "";
  at += needle.size();
  const size_t end = labels.find('"', at);
  return end == std::string::npos ? "" : labels.substr(at, end - at);
}

}  // namespace

PromHistogram read_histogram(const std::vector<net::PromSample>& samples, const std::string& name) {
  PromHistogram h;
  std::vector<std::pair<double, double>> buckets;  // (le, cumulative count)
  for (const auto& s : samples) {
    if (s.name == name + "_bucket") {
      const std::string le = label_value(s.labels, "le");
      if (le.empty()) continue;
      const double bound =
          le == "+Inf" ? std::numeric_limits<double>::infinity() : std::strtod(le.c_str(), nullptr);
      buckets.emplace_back(bound, s.value);
      h.found = true;
    } else if (s.name == name + "_sum") {
      h.sum = s.value;
    } else if (s.name == name + "_count") {
      h.count = s.value;
    }
  }
  std::sort(buckets.begin(), buckets.end());
  for (const auto& [bound, c] : buckets) {
    if (std::isinf(bound)) continue;
    h.bounds.push_back(bound);
    h.cumulative.push_back(c);
  }
  h.cumulative.push_back(h.count);
  return h;
}

nlohmann::json histogram_delta_us(const PromHistogram& before, const PromHistogram& after) {
  if (!after.found) return nlohmann::json::object();
  const bool same = before.found && before.bounds == after.bounds;
  std::vector<double> cum(after.cumulative.size());
  for (size_t i = 0; i < cum.size(); ++i)
    cum[i] = after.cumulative[i] - (same ? before.cumulative[i] : 0.0);
  const double count = after.count - (same ? before.count : 0.0);
  const double sum = after.sum - (same ? before.sum : 0.0);
  nlohmann::json out = {{"count", count}, {"mean", count > 0 ? sum / count * 1e6 : 0.0}};
  auto quantile = [&](double q) {
    if (count <= 0) return 0.0;
    const double rank = q * count;
    for (size_t i = 0; i < cum.size(); ++i) {
      if (cum[i] < rank) continue;
      if (i >= after.bounds.size()) return after.bounds.empty() ? 0.0 : after.bounds.back() * 1e6;
      const double lo = i == 0 ? 0.0 : after.bounds[i - 1];
      const double below = i == 0 ? 0.0 : cum[i - 1];
      const double in = cum[i] - below;
      const double f = in > 0 ? (rank - below) / in : 1.0;
      return (lo + f * (after.bounds[i] - lo)) * 1e6;
    }
    return 0.0;
  };
  out["p50"] = quantile(0.50);
  out["p90"] = quantile(0.90);
  out["p99"] = quantile(0.99);
  return out;
}

}  // namespace loom::bench
