// Metrics: Prometheus counters, gauges and histograms with labels, rendered in
// the text exposition format (version 0.0.4). Every method is thread-safe
// (one mutex; updates are a few per token at most).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace loom::server {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Metrics {
 public:
  // Declares a family (name includes the loom_ prefix). Histograms take their
  // bucket upper bounds (seconds); counters/gauges none.
  void declare_counter(const std::string& name, const std::string& help);
  void declare_gauge(const std::string& name, const std::string& help);
  void declare_histogram(const std::string& name, const std::string& help,
                         std::vector<double> buckets);

  void inc(const std::string& name, const Labels& labels = {}, double by = 1.0);
  void set(const std::string& name, double value, const Labels& labels = {});
  void observe(const std::string& name, double value, const Labels& labels = {});
  // Replaces a histogram series with counts kept elsewhere: buckets[i] counts
  // values in (bounds[i-1], bounds[i]] (not cumulative; values past the last
  // bound are in count only).
  void set_histogram(const std::string& name, const std::vector<uint64_t>& buckets, double sum,
                     uint64_t count, const Labels& labels = {});

  // Value of a counter/gauge series (0 when absent); for tests.
  double value(const std::string& name, const Labels& labels = {}) const;
  std::string render() const;

 private:
  enum class Kind { Counter, Gauge, Histogram };
  struct Series {
    double value = 0;               // counter / gauge
    std::vector<uint64_t> buckets;  // histogram: per bucket (not cumulative)
    double sum = 0;
    uint64_t count = 0;
  };
  struct Family {
    Kind kind;
    std::string help;
    std::vector<double> bounds;
    std::map<std::string, Series> series;  // by rendered label set
  };
  Family& family(const std::string& name);  // throws when undeclared

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
};

// Label values escaped for the text format.
std::string render_labels(const Labels& labels);

}  // namespace loom::server
