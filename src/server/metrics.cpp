// Prometheus text format rendering.
#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace loom::server {

std::string render_labels(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i) out += ',';
    out += labels[i].first;
    out += "=\"";
    for (char c : labels[i].second) {
      if (c == '\\') out += "\\\\";
      else if (c == '"') out += "\\\"";
      else if (c == '\n') out += "\\n";
      else out += c;
    }
    out += '"';
  }
  return out + "}";
}

namespace {
std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  return fmt::format("{}", v);
}
// Labels plus one more (le), rendered.
std::string with_le(const std::string& rendered, const std::string& le) {
  if (rendered.empty()) return "{le=\"" + le + "\"}";
  return rendered.substr(0, rendered.size() - 1) + ",le=\"" + le + "\"}";
}
}  // namespace

void Metrics::declare_counter(const std::string& name, const std::string& help) {
  std::lock_guard<std::mutex> lk(mu_);
  families_[name] = Family{Kind::Counter, help, {}, {}};
}
void Metrics::declare_gauge(const std::string& name, const std::string& help) {
  std::lock_guard<std::mutex> lk(mu_);
  families_[name] = Family{Kind::Gauge, help, {}, {}};
}
void Metrics::declare_histogram(const std::string& name, const std::string& help,
                                std::vector<double> buckets) {
  std::sort(buckets.begin(), buckets.end());
  std::lock_guard<std::mutex> lk(mu_);
  families_[name] = Family{Kind::Histogram, help, std::move(buckets), {}};
}

Metrics::Family& Metrics::family(const std::string& name) {
  auto it = families_.find(name);
  LOOM_CHECK(it != families_.end(), "metric {} is not declared", name);
  return it->second;
}

void Metrics::inc(const std::string& name, const Labels& labels, double by) {
  std::lock_guard<std::mutex> lk(mu_);
  family(name).series[render_labels(labels)].value += by;
}

void Metrics::set(const std::string& name, double value, const Labels& labels) {
  std::lock_guard<std::mutex> lk(mu_);
  family(name).series[render_labels(labels)].value = value;
}

void Metrics::observe(const std::string& name, double value, const Labels& labels) {
  std::lock_guard<std::mutex> lk(mu_);
  Family& f = family(name);
  Series& s = f.series[render_labels(labels)];
  if (s.buckets.empty()) s.buckets.assign(f.bounds.size(), 0);
  for (size_t i = 0; i < f.bounds.size(); ++i)
    if (value <= f.bounds[i]) {
      ++s.buckets[i];
      break;
    }
  s.sum += value;
  ++s.count;
}

void Metrics::set_histogram(const std::string& name, const std::vector<uint64_t>& buckets,
                            double sum, uint64_t count, const Labels& labels) {
  std::lock_guard<std::mutex> lk(mu_);
  Family& f = family(name);
  Series& s = f.series[render_labels(labels)];
  s.buckets.assign(f.bounds.size(), 0);
  for (size_t i = 0; i < f.bounds.size() && i < buckets.size(); ++i) s.buckets[i] = buckets[i];
  s.sum = sum;
  s.count = count;
}

double Metrics::value(const std::string& name, const Labels& labels) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  auto s = it->second.series.find(render_labels(labels));
  return s == it->second.series.end() ? 0 : s->second.value;
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    const char* type = f.kind == Kind::Counter ? "counter" : f.kind == Kind::Gauge ? "gauge" : "histogram";
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, f.help, name, type);
    if (f.kind != Kind::Histogram && f.series.empty()) out += name + " 0\n";
    for (const auto& [labels, s] : f.series) {
      if (f.kind != Kind::Histogram) {
        out += name + labels + " " + number(s.value) + "\n";
        continue;
      }
      uint64_t cumulative = 0;
      for (size_t i = 0; i < f.bounds.size(); ++i) {
        cumulative += s.buckets.empty() ? 0 : s.buckets[i];
        out += name + "_bucket" + with_le(labels, number(f.bounds[i])) + " " +
               std::to_string(cumulative) + "\n";
      }
      out += name + "_bucket" + with_le(labels, "+Inf") + " " + std::to_string(s.count) + "\n";
      out += name + "_sum" + labels + " " + number(s.sum) + "\n";
      out += name + "_count" + labels + " " + std::to_string(s.count) + "\n";
    }
  }
  return out;
}

}  // namespace loom::server
