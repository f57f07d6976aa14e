#include "soak_stats.h"

#include <algorithm>

#include "report.h"

namespace loom::bench {

const char* soak_kind_name(SoakKind kind) {
  switch (kind) {
    case SoakKind::Stream: return "stream";
    case SoakKind::ChatStream: return "chat_stream";
    case SoakKind::Plain: return "plain";
    case SoakKind::StreamDisconnect: return "stream_disconnect";
    case SoakKind::PlainDisconnect: return "plain_disconnect";
    case SoakKind::BadRequest: return "bad_request";
    case SoakKind::Tokenize: return "tokenize";
    case SoakKind::TenantAtLimit: return "tenant_at_limit";
  }
  return "?";
}

const std::vector<SoakKind>& soak_kinds() {
  static const std::vector<SoakKind> kinds = {
      SoakKind::Stream,          SoakKind::ChatStream, SoakKind::Plain,
      SoakKind::StreamDisconnect, SoakKind::PlainDisconnect, SoakKind::BadRequest,
      SoakKind::Tokenize,        SoakKind::TenantAtLimit};
  return kinds;
}

double soak_kind_weight(SoakKind kind) {
  switch (kind) {
    case SoakKind::Stream: return 0.25;
    case SoakKind::ChatStream: return 0.10;
    case SoakKind::Plain: return 0.15;
    case SoakKind::StreamDisconnect: return 0.15;
    case SoakKind::PlainDisconnect: return 0.05;
    case SoakKind::BadRequest: return 0.15;
    case SoakKind::Tokenize: return 0.05;
    case SoakKind::TenantAtLimit: return 0.10;
  }
  return 0;
}

double least_squares_slope(const std::vector<double>& x, const std::vector<double>& y) {
  const size_t n = std::min(x.size(), y.size());
  if (n < 2) return 0;
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; ++i) mx += x[i], my += y[i];
  mx /= double(n);
  my /= double(n);
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < n; ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
  }
  return sxx > 0 ? sxy / sxx : 0;
}

nlohmann::json soak_window_summary(const std::vector<SoakRecord>& records, size_t max_examples) {
  nlohmann::json counts = nlohmann::json::object();
  nlohmann::json statuses = nlohmann::json::object();
  nlohmann::json examples = nlohmann::json::array();
  std::vector<double> ttft, e2e;
  int64_t unexpected = 0;
  for (const auto& r : records) {
    const std::string name = soak_kind_name(r.kind);
    counts[name] = counts.value(name, 0) + 1;
    const std::string st = std::to_string(r.status);
    statuses[st] = statuses.value(st, 0) + 1;
    if (!r.expected) {
      ++unexpected;
      if (examples.size() < max_examples) examples.push_back(name + ": " + r.problem);
    }
    if (r.expected && r.status == 200) {
      if (r.first_token_s >= 0) ttft.push_back((r.first_token_s - r.send_s) * 1e3);
      if (r.kind == SoakKind::Stream || r.kind == SoakKind::ChatStream || r.kind == SoakKind::Plain)
        e2e.push_back((r.done_s - r.send_s) * 1e3);
    }
  }
  return {{"requests", counts},          {"total", records.size()},
          {"unexpected", unexpected},    {"unexpected_examples", examples},
          {"statuses", statuses},        {"ttft_ms", to_json(percentiles(ttft))},
          {"e2e_ms", to_json(percentiles(e2e))}};
}

nlohmann::json to_json(const SoakServerSample& s) {
  return {{"t_s", s.t_s},
          {"rss_bytes", s.rss_bytes},
          {"rss_anon_bytes", s.rss_anon_bytes},
          {"rss_file_bytes", s.rss_file_bytes},
          {"fds", s.fds},
          {"kv_used_blocks", s.kv_used_blocks},
          {"kv_total_blocks", s.kv_total_blocks},
          {"running", s.running},
          {"waiting", s.waiting},
          {"http_in_flight", s.http_in_flight}};
}

nlohmann::json soak_memory_summary(const std::vector<SoakServerSample>& samples, double warmup_s) {
  nlohmann::json j;
  if (samples.empty()) return j;
  std::vector<double> hours, rss_mb, anon_mb, fds;
  int64_t lo = samples[0].rss_bytes, hi = lo;
  for (const auto& s : samples) {
    lo = std::min(lo, s.rss_bytes);
    hi = std::max(hi, s.rss_bytes);
    if (s.t_s < warmup_s) continue;
    hours.push_back(s.t_s / 3600.0);
    rss_mb.push_back(double(s.rss_bytes) / 1e6);
    anon_mb.push_back(double(s.rss_anon_bytes) / 1e6);
    fds.push_back(double(s.fds));
  }
  j["rss_bytes"] = {{"first", samples.front().rss_bytes},
                    {"last", samples.back().rss_bytes},
                    {"min", lo},
                    {"max", hi}};
  j["rss_anon_bytes"] = {{"first", samples.front().rss_anon_bytes},
                         {"last", samples.back().rss_anon_bytes}};
  j["slope_from_s"] = warmup_s;
  j["slope_samples"] = hours.size();
  j["rss_mb_per_hour"] = least_squares_slope(hours, rss_mb);
  j["rss_anon_mb_per_hour"] = least_squares_slope(hours, anon_mb);
  j["fds_per_hour"] = least_squares_slope(hours, fds);
  return j;
}

}  // namespace loom::bench
