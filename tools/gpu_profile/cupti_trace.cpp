// Kernel-level profiler for any CUDA process, as a CUPTI injection library.
//
// The CUDA driver loads the shared object named by CUDA_INJECTION64_PATH and
// calls its InitializeInjection(); there we enable CUPTI activity records for
// kernels (CONCURRENT_KERNEL: also the kernels replayed from CUDA graphs, with
// their graphId), memcpys and memsets, collect them as CUPTI hands buffers
// back, and at process exit flush, summarise, print a table on stderr and
// write $LOOM_TRACE_OUT.json and .txt (default /tmp/loom_trace).
//
// Not part of the CMake build (CI has no CUPTI headers): scripts/gpu/kernel_profile.sh
// compiles it on the GPU machine and runs a command under it.
//
// Environment:
//   LOOM_TRACE_OUT=PREFIX         output files PREFIX.json and PREFIX.txt
//   LOOM_TRACE_SKIP_S=S           ignore activities starting in the first S seconds
//                                 after the first activity (loading, warm-up)
//   LOOM_TRACE_MAX_S=S            keep only activities starting in the S seconds after that
//   LOOM_TRACE_STEP_KERNEL=SUB    each start of a kernel whose name (demangled, without
//                                 the parameter list) contains SUB begins a "step": per-step
//                                 GPU busy time and wall span (start to next start)
//   LOOM_TRACE_TOP=N              kernels listed (40); the rest are one "other" row
//   LOOM_TRACE_FULL_NAMES=1       keep kernel parameter lists in the names
//   LOOM_TRACE_MAX_RECORDS=N      records kept in memory (10,000,000; 40 bytes each)
//   LOOM_TRACE_MAIN_PID=PID       other processes (children) write PREFIX.<pid>.json/.txt
//
// The summary (Summarizer below) is plain C++ with no CUPTI in it; compiled with
// -DLOOM_TRACE_SELFTEST this file is a small program that feeds it synthetic
// records and checks the numbers.
#include <cxxabi.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace loomtrace {

enum class Kind : uint8_t { Kernel = 0, Memcpy = 1, Memset = 2 };

// One GPU activity, times in ns on CUPTI's clock. copy_kind: CUpti_ActivityMemcpyKind.
struct Activity {
  uint64_t start = 0;
  uint64_t end = 0;
  uint64_t bytes = 0;
  uint32_t name = 0;   // index into the name table (kernels)
  uint32_t graph = 0;  // CUDA graph id, 0 when not launched from a graph
  uint32_t stream = 0;
  Kind kind = Kind::Kernel;
  uint8_t copy_kind = 0;
};

struct Options {
  double skip_s = 0;  // ignore activities starting before first + skip
  double max_s = 0;   // 0: no limit
  std::string step_kernel;
  size_t top = 40;
  bool full_names = false;
};

struct Stats {  // over steps
  double p50 = 0, p90 = 0, mean = 0, min = 0, max = 0;
};

struct KernelRow {
  std::string name;
  uint64_t count = 0;
  double total_us = 0;
  double mean_us = 0;
  double pct_busy = 0;
  double us_per_step = 0;  // time in [first step start, last step start) / steps
};

struct CopyRow {
  std::string kind;
  uint64_t count = 0;
  uint64_t bytes = 0;
  double total_us = 0;
};

struct GapBucket {
  const char* label;
  double upper_us;  // exclusive; infinity for the last
  uint64_t count = 0;
  double idle_us = 0;
};

struct Summary {
  Options opt;
  uint64_t activities_total = 0, activities_in_window = 0;
  uint64_t dropped_cupti = 0, dropped_cap = 0;
  uint64_t kernels = 0, memcpys = 0, memsets = 0;
  double window_offset_s = 0;  // window start - first activity
  double span_us = 0, busy_us = 0, idle_us = 0;
  std::vector<GapBucket> gaps;
  // kernels
  uint64_t distinct_kernels = 0;
  double kernel_total_us = 0;
  uint64_t graph_launches = 0, graphs = 0;
  double graph_us = 0;
  std::vector<KernelRow> top;
  uint64_t other_names = 0, other_count = 0;
  double other_us = 0;
  std::vector<CopyRow> copies;  // memcpy kinds seen, then "memset"
  // steps
  uint64_t step_boundaries = 0, steps = 0;
  Stats step_busy_us, step_wall_us, step_idle_us, step_kernels;
  double step_busy_over_wall = 0;
};

inline std::string demangle(const std::string& raw) {
  if (raw.size() < 2 || raw[0] != '_' || raw[1] != 'Z') return raw;
  int status = 0;
  char* d = abi::__cxa_demangle(raw.c_str(), nullptr, nullptr, &status);
  if (status != 0 || d == nullptr) {
    std::free(d);
    return raw;
  }
  std::string out(d);
  std::free(d);
  return out;
}

// "void ns::k<128>(float*, int)" -> "ns::k<128>": drops a leading "void " and
// the trailing parameter list.
inline std::string strip_signature(std::string s) {
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);
  if (!s.empty() && s.back() == ')') {
    int depth = 0;
    for (size_t i = s.size(); i-- > 0;) {
      if (s[i] == ')')
        ++depth;
      else if (s[i] == '(' && --depth == 0) {
        if (i > 0) s.resize(i);
        break;
      }
    }
  }
  return s;
}

inline std::string truncate_name(const std::string& s, size_t n = 100) {
  return s.size() <= n ? s : s.substr(0, n - 3) + "...";
}

inline Stats stats_of(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto pct = [&](double p) {
    size_t k = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, k == 0 ? 0 : k - 1)];
  };
  s.p50 = pct(50);
  s.p90 = pct(90);
  s.min = v.front();
  s.max = v.back();
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  return s;
}

inline const char* copy_kind_name(uint8_t k) {
  switch (k) {  // CUpti_ActivityMemcpyKind
    case 1:
      return "HtoD";
    case 2:
      return "DtoH";
    case 3:
      return "HtoA";
    case 4:
      return "AtoH";
    case 5:
      return "AtoA";
    case 6:
      return "AtoD";
    case 7:
      return "DtoA";
    case 8:
      return "DtoD";
    case 9:
      return "HtoH";
    case 10:
      return "PtoP";
    default:
      return "other";
  }
}

inline double us(uint64_t ns) {
  return static_cast<double>(ns) / 1000.0;
}

// acts: every activity recorded (any order); names: raw (possibly mangled)
// kernel names indexed by Activity::name.
inline Summary summarize(std::vector<Activity> acts, const std::vector<std::string>& names,
                         const Options& opt) {
  Summary s;
  s.opt = opt;
  s.gaps = {{"<2us", 2, 0, 0},       {"2-5us", 5, 0, 0},         {"5-20us", 20, 0, 0},
            {"20-100us", 100, 0, 0}, {"100-1000us", 1000, 0, 0}, {">1000us", INFINITY, 0, 0}};
  s.activities_total = acts.size();
  if (acts.empty()) return s;

  // Window.
  uint64_t first = UINT64_MAX;
  for (const auto& a : acts) first = std::min(first, a.start);
  const uint64_t skip_ns = static_cast<uint64_t>(std::max(0.0, opt.skip_s) * 1e9);
  const uint64_t w0 = first + skip_ns;
  const uint64_t w1 = opt.max_s > 0 ? w0 + static_cast<uint64_t>(opt.max_s * 1e9) : UINT64_MAX;
  acts.erase(std::remove_if(acts.begin(), acts.end(),
                            [&](const Activity& a) { return a.start < w0 || a.start >= w1; }),
             acts.end());
  std::sort(acts.begin(), acts.end(), [](const Activity& a, const Activity& b) {
    return a.start != b.start ? a.start < b.start : a.end < b.end;
  });
  s.activities_in_window = acts.size();
  if (acts.empty()) return s;
  s.window_offset_s = static_cast<double>(acts.front().start - first) / 1e9;

  // Timeline: union of intervals, gaps between them.
  std::vector<std::pair<uint64_t, uint64_t>> busy;  // merged, sorted
  uint64_t last_end = 0;
  for (const auto& a : acts) {
    const uint64_t e = std::max(a.end, a.start);
    last_end = std::max(last_end, e);
    if (!busy.empty() && a.start <= busy.back().second) {
      busy.back().second = std::max(busy.back().second, e);
      continue;
    }
    if (!busy.empty()) {
      const double gap = us(a.start - busy.back().second);
      for (auto& b : s.gaps)
        if (gap < b.upper_us) {
          ++b.count;
          b.idle_us += gap;
          break;
        }
    }
    busy.emplace_back(a.start, e);
  }
  s.span_us = us(last_end - acts.front().start);
  for (const auto& b : busy) s.busy_us += us(b.second - b.first);
  s.idle_us = s.span_us - s.busy_us;

  // Names: demangled, without parameters unless asked, then truncated.
  std::vector<std::string> base(names.size()), display(names.size());
  std::vector<bool> resolved(names.size(), false);
  auto resolve = [&](uint32_t id) {
    if (id >= names.size()) return;
    if (resolved[id]) return;
    resolved[id] = true;
    const std::string d = demangle(names[id]);
    base[id] = strip_signature(d);
    display[id] = truncate_name(opt.full_names ? d : base[id]);
  };

  // Kernels and copies.
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_name;  // display -> (count, ns)
  std::map<uint8_t, CopyRow> copies;
  CopyRow memset_row;
  memset_row.kind = "memset";
  std::vector<uint32_t> graph_ids;
  std::vector<uint64_t> kernel_starts, step_starts;
  uint64_t kernel_ns = 0, graph_ns = 0;
  for (const auto& a : acts) {
    const uint64_t d = a.end > a.start ? a.end - a.start : 0;
    if (a.kind == Kind::Kernel) {
      ++s.kernels;
      kernel_ns += d;
      kernel_starts.push_back(a.start);
      if (a.graph != 0) {
        ++s.graph_launches;
        graph_ns += d;
        graph_ids.push_back(a.graph);
      }
      resolve(a.name);
      const std::string& n = a.name < names.size() ? display[a.name] : std::string("?");
      auto& r = by_name[n];
      ++r.first;
      r.second += d;
      if (!opt.step_kernel.empty() && a.name < names.size() &&
          base[a.name].find(opt.step_kernel) != std::string::npos)
        step_starts.push_back(a.start);
    } else if (a.kind == Kind::Memcpy) {
      ++s.memcpys;
      auto& r = copies[a.copy_kind];
      r.kind = copy_kind_name(a.copy_kind);
      ++r.count;
      r.bytes += a.bytes;
      r.total_us += us(d);
    } else {
      ++s.memsets;
      ++memset_row.count;
      memset_row.bytes += a.bytes;
      memset_row.total_us += us(d);
    }
  }
  // acts are sorted by start; boundary kernels starting together make one boundary
  step_starts.erase(std::unique(step_starts.begin(), step_starts.end()), step_starts.end());
  s.kernel_total_us = us(kernel_ns);
  s.graph_us = us(graph_ns);
  std::sort(graph_ids.begin(), graph_ids.end());
  s.graphs =
      static_cast<uint64_t>(std::unique(graph_ids.begin(), graph_ids.end()) - graph_ids.begin());
  s.distinct_kernels = by_name.size();
  std::map<std::string, uint64_t>
      in_steps;  // display -> ns, kernels starting in [first, last boundary)
  if (step_starts.size() >= 2)
    for (const auto& a : acts)
      if (a.kind == Kind::Kernel && a.start >= step_starts.front() &&
          a.start < step_starts.back() && a.name < names.size())
        in_steps[display[a.name]] += a.end > a.start ? a.end - a.start : 0;
  std::vector<KernelRow> rows;
  for (const auto& [n, r] : by_name) {
    KernelRow k;
    k.name = n;
    k.count = r.first;
    k.total_us = us(r.second);
    k.mean_us = k.total_us / static_cast<double>(k.count);
    k.pct_busy = s.busy_us > 0 ? 100.0 * k.total_us / s.busy_us : 0;
    if (const auto it = in_steps.find(n); it != in_steps.end())
      k.us_per_step = us(it->second) / static_cast<double>(step_starts.size() - 1);
    rows.push_back(k);
  }
  std::sort(rows.begin(), rows.end(), [](const KernelRow& a, const KernelRow& b) {
    return a.total_us != b.total_us ? a.total_us > b.total_us : a.name < b.name;
  });
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i < opt.top) {
      s.top.push_back(rows[i]);
    } else {
      ++s.other_names;
      s.other_count += rows[i].count;
      s.other_us += rows[i].total_us;
    }
  }
  for (const auto& [k, r] : copies) s.copies.push_back(r);
  if (memset_row.count > 0) s.copies.push_back(memset_row);

  // Steps: [b_i, b_{i+1}) for consecutive boundaries.
  s.step_boundaries = step_starts.size();
  if (step_starts.size() >= 2) {
    std::vector<double> busy_v, wall_v, idle_v, kern_v;
    size_t bi = 0;  // first merged interval that may overlap the step
    for (size_t i = 0; i + 1 < step_starts.size(); ++i) {
      const uint64_t a = step_starts[i], b = step_starts[i + 1];
      while (bi < busy.size() && busy[bi].second <= a) ++bi;
      uint64_t in = 0;
      for (size_t j = bi; j < busy.size() && busy[j].first < b; ++j)
        in += std::min(busy[j].second, b) - std::max(busy[j].first, a);
      const auto k0 = std::lower_bound(kernel_starts.begin(), kernel_starts.end(), a);
      const auto k1 = std::lower_bound(kernel_starts.begin(), kernel_starts.end(), b);
      busy_v.push_back(us(in));
      wall_v.push_back(us(b - a));
      idle_v.push_back(us(b - a - in));
      kern_v.push_back(static_cast<double>(k1 - k0));
    }
    s.steps = busy_v.size();
    double sb = 0, sw = 0;
    for (size_t i = 0; i < busy_v.size(); ++i) sb += busy_v[i], sw += wall_v[i];
    s.step_busy_over_wall = sw > 0 ? sb / sw : 0;
    s.step_busy_us = stats_of(busy_v);
    s.step_wall_us = stats_of(wall_v);
    s.step_idle_us = stats_of(idle_v);
    s.step_kernels = stats_of(kern_v);
  }
  return s;
}

inline std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
inline std::string fmt(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

inline std::string human_bytes(uint64_t b) {
  const double x = static_cast<double>(b);
  if (x >= 1e9) return fmt("%.2f GB", x / 1e9);
  if (x >= 1e6) return fmt("%.2f MB", x / 1e6);
  if (x >= 1e3) return fmt("%.1f kB", x / 1e3);
  return fmt("%" PRIu64 " B", b);
}

inline std::string render_table(const Summary& s) {
  std::string o = "== loom kernel profile ==\n";
  o += fmt("window: skip %.1f s, max %s; %" PRIu64 " of %" PRIu64 " activities (kernels %" PRIu64
           ", memcpy %" PRIu64 ", memset %" PRIu64 "); dropped: %" PRIu64 " by CUPTI, %" PRIu64
           " over the record cap\n",
           s.opt.skip_s, s.opt.max_s > 0 ? fmt("%.1f s", s.opt.max_s).c_str() : "-",
           s.activities_in_window, s.activities_total, s.kernels, s.memcpys, s.memsets,
           s.dropped_cupti, s.dropped_cap);
  if (s.activities_in_window == 0) return o + "no GPU activity in the window\n";
  o += fmt("timeline: first start -> last end %.3f ms; GPU busy %.3f ms (%.1f%%); idle %.3f ms\n",
           s.span_us / 1e3, s.busy_us / 1e3, s.span_us > 0 ? 100.0 * s.busy_us / s.span_us : 0.0,
           s.idle_us / 1e3);
  o += "idle gaps:";
  for (const auto& g : s.gaps)
    o += fmt("  %s %" PRIu64 " (%.3f ms)", g.label, g.count, g.idle_us / 1e3);
  o += "\n";
  o += fmt("kernels: %" PRIu64 " launches, %" PRIu64 " names, %.3f ms; from graphs: %" PRIu64
           " launches (%.3f ms) in %" PRIu64 " graphs\n",
           s.kernels, s.distinct_kernels, s.kernel_total_us / 1e3, s.graph_launches,
           s.graph_us / 1e3, s.graphs);
  const bool per_step = s.steps > 0;
  o += fmt("%4s %11s %6s %9s %10s%s  %s\n", "#", "total_ms", "%busy", "count", "mean_us",
           per_step ? "    us/step" : "", "kernel");
  auto row = [&](const std::string& idx, double total_us, double pct, uint64_t count, double mean,
                 double per, const std::string& name) {
    o += fmt("%4s %11.3f %5.1f%% %9" PRIu64 " %10.2f", idx.c_str(), total_us / 1e3, pct, count,
             mean);
    if (per_step) o += per >= 0 ? fmt(" %10.2f", per) : fmt(" %10s", "");
    o += "  " + name + "\n";
  };
  for (size_t i = 0; i < s.top.size(); ++i)
    row(std::to_string(i + 1), s.top[i].total_us, s.top[i].pct_busy, s.top[i].count,
        s.top[i].mean_us, s.top[i].us_per_step, s.top[i].name);
  if (s.other_names > 0)
    row("-", s.other_us, s.busy_us > 0 ? 100.0 * s.other_us / s.busy_us : 0, s.other_count,
        s.other_us / static_cast<double>(s.other_count), -1,
        fmt("(%" PRIu64 " other kernels)", s.other_names));
  for (const auto& c : s.copies)
    o += fmt("%-6s %9" PRIu64 " x, %s, %.3f ms\n", c.kind.c_str(), c.count,
             human_bytes(c.bytes).c_str(), c.total_us / 1e3);
  if (!s.opt.step_kernel.empty()) {
    o += fmt("steps (a kernel named *%s* starts each): %" PRIu64 " boundaries, %" PRIu64 " steps\n",
             s.opt.step_kernel.c_str(), s.step_boundaries, s.steps);
    if (s.steps > 0) {
      auto st = [&](const char* what, const Stats& x, const char* unit) {
        o += fmt("  %-14s p50 %9.2f  p90 %9.2f  mean %9.2f  min %9.2f  max %10.2f %s\n", what,
                 x.p50, x.p90, x.mean, x.min, x.max, unit);
      };
      st("GPU busy", s.step_busy_us, "us");
      st("wall (span)", s.step_wall_us, "us");
      st("GPU idle", s.step_idle_us, "us");
      st("kernels", s.step_kernels, "");
      o += fmt("  GPU busy / wall over all steps: %.1f%%\n", 100.0 * s.step_busy_over_wall);
    }
  }
  return o;
}

inline std::string json_str(const std::string& in) {
  std::string o = "\"";
  for (unsigned char c : in) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += static_cast<char>(c);
    } else if (c < 0x20) {
      o += fmt("\\u%04x", c);
    } else {
      o += static_cast<char>(c);
    }
  }
  return o + "\"";
}

inline std::string json_stats(const Stats& x) {
  return fmt("{\"p50\": %.3f, \"p90\": %.3f, \"mean\": %.3f, \"min\": %.3f, \"max\": %.3f}", x.p50,
             x.p90, x.mean, x.min, x.max);
}

inline std::string render_json(const Summary& s, long pid) {
  std::string o = "{\n";
  o += fmt("  \"pid\": %ld,\n", pid);
  o += fmt(
      "  \"options\": {\"skip_s\": %.3f, \"max_s\": %.3f, \"step_kernel\": %s, \"top\": %zu},\n",
      s.opt.skip_s, s.opt.max_s, json_str(s.opt.step_kernel).c_str(), s.opt.top);
  o += fmt("  \"activities\": {\"total\": %" PRIu64 ", \"in_window\": %" PRIu64
           ", \"kernels\": %" PRIu64 ", \"memcpys\": %" PRIu64 ", \"memsets\": %" PRIu64
           ", \"dropped_cupti\": %" PRIu64 ", \"dropped_cap\": %" PRIu64
           ", \"window_offset_s\": %.3f},\n",
           s.activities_total, s.activities_in_window, s.kernels, s.memcpys, s.memsets,
           s.dropped_cupti, s.dropped_cap, s.window_offset_s);
  o +=
      fmt("  \"timeline\": {\"span_us\": %.3f, \"busy_us\": %.3f, \"idle_us\": %.3f, \"busy_pct\": "
          "%.2f},\n",
          s.span_us, s.busy_us, s.idle_us, s.span_us > 0 ? 100.0 * s.busy_us / s.span_us : 0.0);
  o += "  \"idle_gaps\": [";
  for (size_t i = 0; i < s.gaps.size(); ++i)
    o += fmt("%s{\"bucket\": \"%s\", \"count\": %" PRIu64 ", \"idle_us\": %.3f}", i ? ", " : "",
             s.gaps[i].label, s.gaps[i].count, s.gaps[i].idle_us);
  o += "],\n";
  o +=
      fmt("  \"kernels\": {\"launches\": %" PRIu64 ", \"names\": %" PRIu64
          ", \"total_us\": %.3f, \"graph_launches\": %" PRIu64
          ", \"graph_us\": %.3f, \"graphs\": %" PRIu64 ",\n",
          s.kernels, s.distinct_kernels, s.kernel_total_us, s.graph_launches, s.graph_us, s.graphs);
  o += "    \"top\": [\n";
  for (size_t i = 0; i < s.top.size(); ++i) {
    const auto& k = s.top[i];
    o += fmt("      {\"count\": %" PRIu64
             ", \"total_us\": %.3f, \"mean_us\": %.3f, \"pct_busy\": %.2f",
             k.count, k.total_us, k.mean_us, k.pct_busy);
    if (s.steps > 0) o += fmt(", \"us_per_step\": %.3f", k.us_per_step);
    o += ", \"name\": " + json_str(k.name) + (i + 1 < s.top.size() ? "},\n" : "}\n");
  }
  o += "    ],\n";
  o +=
      fmt("    \"other\": {\"names\": %" PRIu64 ", \"count\": %" PRIu64 ", \"total_us\": %.3f}},\n",
          s.other_names, s.other_count, s.other_us);
  o += "  \"copies\": [";
  for (size_t i = 0; i < s.copies.size(); ++i)
    o += fmt("%s{\"kind\": \"%s\", \"count\": %" PRIu64 ", \"bytes\": %" PRIu64
             ", \"total_us\": %.3f}",
             i ? ", " : "", s.copies[i].kind.c_str(), s.copies[i].count, s.copies[i].bytes,
             s.copies[i].total_us);
  o += "],\n";
  o += fmt("  \"steps\": {\"kernel\": %s, \"boundaries\": %" PRIu64 ", \"steps\": %" PRIu64,
           json_str(s.opt.step_kernel).c_str(), s.step_boundaries, s.steps);
  if (s.steps > 0) {
    o += ",\n    \"busy_us\": " + json_stats(s.step_busy_us) +
         ",\n    \"wall_us\": " + json_stats(s.step_wall_us) +
         ",\n    \"idle_us\": " + json_stats(s.step_idle_us) +
         ",\n    \"kernels\": " + json_stats(s.step_kernels) +
         fmt(",\n    \"busy_over_wall\": %.4f", s.step_busy_over_wall);
  }
  o += "}\n}\n";
  return o;
}

}  // namespace loomtrace

#ifdef LOOM_TRACE_SELFTEST
// ---------------------------------------------------------------------------
// Self-test: synthetic records with hand-computed answers.
namespace {

int failures = 0;

void check_near(const char* what, double got, double want, double tol = 1e-6) {
  if (std::fabs(got - want) > tol) {
    std::fprintf(stderr, "FAIL %s: got %.6f want %.6f\n", what, got, want);
    ++failures;
  }
}

void check(const char* what, bool ok) {
  if (!ok) {
    std::fprintf(stderr, "FAIL %s\n", what);
    ++failures;
  }
}

}  // namespace

int main() {
  using namespace loomtrace;
  check("demangle", demangle("_Z16embedding_kernelPKfi") == "embedding_kernel(float const*, int)");
  check("strip plain",
        strip_signature("embedding_kernel(float const*, int)") == "embedding_kernel");
  check("strip template", strip_signature(demangle("_Z4gemmILi128EEvPf")) == "gemm<128>");
  check("strip nested parens", strip_signature("f(void (*)(int))") == "f");
  check("strip anon ns",
        strip_signature("(anonymous namespace)::k(int)") == "(anonymous namespace)::k");
  check("strip unmangled", strip_signature("nvjet_tst_64x8_v_bz_TNT") == "nvjet_tst_64x8_v_bz_TNT");
  check("truncate", truncate_name(std::string(150, 'a')).size() == 100);

  const std::vector<std::string> names = {"_Z16embedding_kernelPKfi", "_Z4gemmILi128EEvPf",
                                          "rmsnorm", "side", "warmup"};
  const uint32_t EMB = 0, GEMM = 1, NORM = 2, SIDE = 3, WARM = 4;
  const uint64_t T0 = 5'000'000'000ull;  // CUPTI timestamps are large
  const uint64_t US = 1000;
  std::vector<Activity> acts;
  auto kern = [&](uint64_t s, uint64_t d, uint32_t name, uint32_t graph = 0, uint32_t stream = 7) {
    Activity a;
    a.start = s;
    a.end = s + d;
    a.name = name;
    a.graph = graph;
    a.stream = stream;
    acts.push_back(a);
  };
  auto copy = [&](uint64_t s, uint64_t d, uint8_t ck, uint64_t bytes) {
    Activity a;
    a.start = s;
    a.end = s + d;
    a.kind = Kind::Memcpy;
    a.copy_kind = ck;
    a.bytes = bytes;
    acts.push_back(a);
  };
  // Warm-up activity at T0 (to be skipped by skip_s = 0.5).
  kern(T0, 1000 * US, WARM);
  copy(T0 + 2000 * US, 50 * US, 1, 1 << 20);
  // Four steps from T0 + 1 s, 100 us apart; each:
  //   emb  [s, s+2)            graph 11
  //   gemm [s+3, s+13)         graph 11   gap 1 us   (<2)
  //   side [s+5, s+8)          stream 8, inside gemm: no gap, no extra busy
  //   norm [s+16, s+20)        gap 3 us   (2-5)
  //   DtoH [s+30, s+32)        gap 10 us  (5-20), 4 bytes
  // busy per step: 2 + 10 + 4 + 2 = 18 us; then the gap to the next step: 68 us (20-100).
  const uint64_t S0 = T0 + 1'000'000 * US;
  for (int i = 0; i < 4; ++i) {
    const uint64_t s = S0 + static_cast<uint64_t>(i) * 100 * US;
    kern(s, 2 * US, EMB, 11);
    kern(s + 3 * US, 10 * US, GEMM, 11);
    kern(s + 5 * US, 3 * US, SIDE, 0, 8);
    kern(s + 16 * US, 4 * US, NORM);
    copy(s + 30 * US, 2 * US, 2, 4);
  }
  // After the last step (ends S0+332): a 500 us gap (100-1000), a memset, then a
  // 2000 us gap (>1000) and a final gemm; steps are start-to-start, so these
  // only extend the timeline.
  {
    Activity m;
    m.kind = Kind::Memset;
    m.start = S0 + 832 * US;
    m.end = m.start + 8 * US;
    m.bytes = 4096;
    acts.push_back(m);
  }
  kern(S0 + 2840 * US, 10 * US, GEMM);
  std::reverse(acts.begin(), acts.end());  // order must not matter

  Options opt;
  opt.skip_s = 0.5;
  opt.step_kernel = "embedding";
  opt.top = 3;
  const Summary s = summarize(acts, names, opt);
  check("total", s.activities_total == 24);
  check("in window", s.activities_in_window == 22);
  check("counts", s.kernels == 17 && s.memcpys == 4 && s.memsets == 1);
  check_near("window offset", s.window_offset_s, 1.0);
  check_near("span", s.span_us, 2850);
  // busy: 4 * 18 + 8 + 10 = 90
  check_near("busy", s.busy_us, 90);
  check_near("idle", s.idle_us, 2760);
  const uint64_t gc[6] = {4, 4, 4, 3, 1, 1};
  const double gi[6] = {4, 12, 40, 204, 500, 2000};
  for (int i = 0; i < 6; ++i) {
    check(("gap count " + std::to_string(i)).c_str(),
          s.gaps[static_cast<size_t>(i)].count == gc[i]);
    check_near(("gap idle " + std::to_string(i)).c_str(), s.gaps[static_cast<size_t>(i)].idle_us,
               gi[i]);
  }
  double gsum = 0;
  for (const auto& g : s.gaps) gsum += g.idle_us;
  check_near("gaps sum to idle", gsum, s.idle_us);
  check_near("kernel total", s.kernel_total_us, 4 * 19 + 10);
  check("graph launches", s.graph_launches == 8 && s.graphs == 1);
  check_near("graph us", s.graph_us, 48);
  check("distinct", s.distinct_kernels == 4);  // warmup skipped
  check("top size", s.top.size() == 3);
  check("top0", s.top[0].name == "gemm<128>" && s.top[0].count == 5);
  check_near("top0 total", s.top[0].total_us, 50);
  check_near("top0 mean", s.top[0].mean_us, 10);
  check_near("top0 pct", s.top[0].pct_busy, 100.0 * 50 / 90);
  // per step: the gemms of steps 0-2 only (step 3 has no next boundary; the last gemm is after it)
  check_near("top0 per step", s.top[0].us_per_step, 10);
  check_near("top1 per step", s.top[1].us_per_step, 4);
  check("top1", s.top[1].name == "rmsnorm" && s.top[1].count == 4);
  check("top2", s.top[2].name == "side" && s.top[2].count == 4);
  check("other", s.other_names == 1 && s.other_count == 4);
  check_near("other us", s.other_us, 8);
  check("copies", s.copies.size() == 2 && s.copies[0].kind == "DtoH" && s.copies[0].count == 4 &&
                      s.copies[0].bytes == 16 && s.copies[1].kind == "memset" &&
                      s.copies[1].bytes == 4096);
  check_near("dtoh us", s.copies[0].total_us, 8);
  check("steps", s.step_boundaries == 4 && s.steps == 3);
  check_near("step busy p50", s.step_busy_us.p50, 18);
  check_near("step wall p50", s.step_wall_us.p50, 100);
  check_near("step wall p90", s.step_wall_us.p90, 100);
  check_near("step idle mean", s.step_idle_us.mean, 82);
  check_near("step kernels", s.step_kernels.p50, 4);
  check_near("busy/wall", s.step_busy_over_wall, 0.18);

  // Uneven steps: an interval crossing a boundary is split between the steps;
  // percentiles are nearest-rank.
  {
    std::vector<Activity> v;
    auto k2 = [&](uint64_t st, uint64_t d, uint32_t n) {
      Activity a;
      a.start = st;
      a.end = st + d;
      a.name = n;
      v.push_back(a);
    };
    // boundaries at 0, 10, 30, 60, 100 (us); spans 10, 20, 30, 40
    const uint64_t b[5] = {0, 10, 30, 60, 100};
    for (uint64_t x : b) k2(T0 + x * US, 1 * US, EMB);
    k2(T0 + 5 * US, 10 * US, GEMM);  // [5, 15): 5 us in step 0 (with emb [0,1): 6), 5 in step 1
    Options o2;
    o2.step_kernel = "embedding_kernel";
    const Summary u = summarize(v, names, o2);
    check("u steps", u.steps == 4);
    // busy per step: [0,1)+[5,10) = 6; [10,15) = 5 (emb [10,11) inside); [30,31) = 1; [60,61) = 1
    check_near("u busy p50", u.step_busy_us.p50, 1);
    check_near("u busy p90", u.step_busy_us.p90, 6);
    check_near("u busy max", u.step_busy_us.max, 6);
    check_near("u busy mean", u.step_busy_us.mean, 13.0 / 4);
    check_near("u wall p50", u.step_wall_us.p50, 20);
    check_near("u wall p90", u.step_wall_us.p90, 40);
    check_near("u busy/wall", u.step_busy_over_wall, 13.0 / 100);
    check_near("u span", u.span_us, 101);
    check_near("u busy", u.busy_us, 14);  // [0,1) [5,15) [30,31) [60,61) [100,101)
  }
  // Max window without skip: [T0, T0 + 1000.2 ms) holds the warm-up kernel and
  // copy and the first two steps (the third starts at T0 + 1000.2 ms).
  {
    Options o3;
    o3.max_s = 1.0002;
    const Summary w = summarize(acts, names, o3);
    check("max window", w.activities_in_window == 2 + 2 * 5);
  }
  check("empty", summarize({}, names, opt).activities_in_window == 0);

  std::fputs(render_table(s).c_str(), stdout);
  std::fputs(render_json(s, 0).c_str(), stdout);
  if (failures) {
    std::fprintf(stderr, "self-test: %d failures\n", failures);
    return 1;
  }
  std::printf("self-test: all checks passed\n");
  return 0;
}

#else
// ---------------------------------------------------------------------------
// CUPTI injection.
#include <cupti_activity.h>  // not cupti.h: its callback metadata headers need a cuda.h of the same release
#include <cupti_result.h>
#include <cupti_version.h>

#include <atomic>
#include <mutex>

// The record structs are versioned; CUPTI fills the newest one its release
// defines, which is the one in cupti_activity.h (older ones moved to
// cupti_activity_deprecated.h). kernel_profile.sh reads the names from the
// header and passes them in; the table below covers the 13.x releases (each
// version appends fields, so start, end, name, streamId and graphId sit at the
// same offsets in all of them).
#ifndef LOOM_CUPTI_KERNEL_T
#if CUPTI_API_VERSION >= 130401
#define LOOM_CUPTI_KERNEL_T CUpti_ActivityKernel13
#define LOOM_CUPTI_MEMCPY_T CUpti_ActivityMemcpy7
#define LOOM_CUPTI_MEMSET_T CUpti_ActivityMemset5
#elif CUPTI_API_VERSION >= 130301
#define LOOM_CUPTI_KERNEL_T CUpti_ActivityKernel12
#elif CUPTI_API_VERSION >= 130101
#define LOOM_CUPTI_KERNEL_T CUpti_ActivityKernel11
#elif CUPTI_API_VERSION >= 130000
#define LOOM_CUPTI_KERNEL_T CUpti_ActivityKernel10
#else
#error \
    "unknown CUPTI version: define LOOM_CUPTI_KERNEL_T, _MEMCPY_T, _MEMSET_T (see cupti_activity.h)"
#endif
#endif
#ifndef LOOM_CUPTI_MEMCPY_T
#define LOOM_CUPTI_MEMCPY_T CUpti_ActivityMemcpy6
#endif
#ifndef LOOM_CUPTI_MEMSET_T
#define LOOM_CUPTI_MEMSET_T CUpti_ActivityMemset4
#endif

namespace {

using loomtrace::Activity;
using loomtrace::Kind;

constexpr size_t kBufferBytes = 8u << 20;

std::mutex g_mu;
std::vector<Activity> g_acts;
std::vector<std::string> g_names;
std::unordered_map<std::string, uint32_t> g_name_ids;
std::unordered_map<const char*, uint32_t> g_ptr_ids;  // CUPTI shares one name string per kernel
uint64_t g_min_start = UINT64_MAX;
uint64_t g_window_ns = UINT64_MAX;  // skip + max: records starting later are dropped early
size_t g_cap = 10'000'000;
uint64_t g_dropped_cap = 0, g_dropped_cupti = 0;
bool g_finished = false;
std::atomic<bool> g_enabled{false};
loomtrace::Options g_opt;
std::string g_out = "/tmp/loom_trace";

void say(const std::string& line) {
  std::fprintf(stderr, "[loom-trace] %s\n", line.c_str());
}

std::string cupti_error(CUptiResult r) {
  const char* s = nullptr;
  if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || s == nullptr)
    return "CUPTI error " + std::to_string(static_cast<int>(r));
  return s;
}

uint32_t name_id(const char* p) {  // under g_mu
  if (p == nullptr) p = "?";
  auto it = g_ptr_ids.find(p);
  if (it != g_ptr_ids.end() && g_names[it->second] == p) return it->second;
  std::string n(p);
  auto [jt, added] = g_name_ids.emplace(n, static_cast<uint32_t>(g_names.size()));
  if (added) g_names.push_back(std::move(n));
  g_ptr_ids[p] = jt->second;
  return jt->second;
}

void add(const Activity& a) {  // under g_mu
  if (a.start == 0) return;    // no timestamp
  g_min_start = std::min(g_min_start, a.start);
  if (g_window_ns != UINT64_MAX && a.start >= g_min_start && a.start - g_min_start >= g_window_ns)
    return;
  if (g_acts.size() >= g_cap) {
    ++g_dropped_cap;
    return;
  }
  g_acts.push_back(a);
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *max_records = 0;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t* buffer, size_t,
                               size_t valid) {
  try {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_finished && buffer != nullptr) {
      CUpti_Activity* rec = nullptr;
      while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        Activity a;
        switch (rec->kind) {
          case CUPTI_ACTIVITY_KIND_KERNEL:
          case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            const auto* k = reinterpret_cast<const LOOM_CUPTI_KERNEL_T*>(rec);
            a.kind = Kind::Kernel;
            a.start = k->start;
            a.end = k->end;
            a.stream = k->streamId;
            a.graph = k->graphId;
            a.name = name_id(k->name);
            add(a);
            break;
          }
          case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const auto* m = reinterpret_cast<const LOOM_CUPTI_MEMCPY_T*>(rec);
            a.kind = Kind::Memcpy;
            a.start = m->start;
            a.end = m->end;
            a.bytes = m->bytes;
            a.copy_kind = m->copyKind;
            a.stream = m->streamId;
            a.graph = m->graphId;
            add(a);
            break;
          }
          case CUPTI_ACTIVITY_KIND_MEMSET: {
            const auto* m = reinterpret_cast<const LOOM_CUPTI_MEMSET_T*>(rec);
            a.kind = Kind::Memset;
            a.start = m->start;
            a.end = m->end;
            a.bytes = m->bytes;
            a.stream = m->streamId;
            a.graph = m->graphId;
            add(a);
            break;
          }
          default:
            break;
        }
      }
      size_t dropped = 0;
      if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS)
        g_dropped_cupti += dropped;
    }
  } catch (...) {
  }
  std::free(buffer);
}

double env_double(const char* name, double dflt) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return dflt;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  return end != v ? x : dflt;
}

bool write_file(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  return std::fclose(f) == 0 && ok;
}

void at_exit() {
  if (!g_enabled.exchange(false)) return;
  try {
    const CUptiResult r = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    if (r != CUPTI_SUCCESS) say("cuptiActivityFlushAll: " + cupti_error(r));
    std::vector<Activity> acts;
    std::vector<std::string> names;
    uint64_t dropped_cap = 0, dropped_cupti = 0;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      g_finished = true;
      acts.swap(g_acts);
      names = g_names;
      dropped_cap = g_dropped_cap;
      dropped_cupti = g_dropped_cupti;
    }
    if (acts.empty() && dropped_cap == 0) return;  // a process that never used the GPU
    loomtrace::Summary s = loomtrace::summarize(std::move(acts), names, g_opt);
    s.dropped_cap = dropped_cap;
    s.dropped_cupti = dropped_cupti;
    const std::string table = loomtrace::render_table(s);
    std::fputs(table.c_str(), stderr);
    const std::string json = loomtrace::render_json(s, static_cast<long>(getpid()));
    if (write_file(g_out + ".json", json) && write_file(g_out + ".txt", table))
      say("wrote " + g_out + ".json and " + g_out + ".txt");
    else
      say("could not write " + g_out + ".json / .txt");
  } catch (...) {
    say("summary failed");
  }
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  static std::atomic<bool> initialized{false};
  if (initialized.exchange(true)) return 1;
  try {
    if (const char* o = std::getenv("LOOM_TRACE_OUT"); o != nullptr && *o != '\0') g_out = o;
    // Child processes inherit CUDA_INJECTION64_PATH: only the process the
    // script started writes PREFIX.json, others PREFIX.<pid>.json.
    if (const char* m = std::getenv("LOOM_TRACE_MAIN_PID");
        m != nullptr && *m != '\0' && std::atol(m) != getpid())
      g_out += "." + std::to_string(getpid());
    g_opt.skip_s = std::max(0.0, env_double("LOOM_TRACE_SKIP_S", 0));
    g_opt.max_s = std::max(0.0, env_double("LOOM_TRACE_MAX_S", 0));
    if (const char* k = std::getenv("LOOM_TRACE_STEP_KERNEL"); k != nullptr) g_opt.step_kernel = k;
    g_opt.top = static_cast<size_t>(std::max(1.0, env_double("LOOM_TRACE_TOP", 40)));
    if (const char* f = std::getenv("LOOM_TRACE_FULL_NAMES");
        f != nullptr && *f != '\0' && *f != '0')
      g_opt.full_names = true;
    g_cap = static_cast<size_t>(std::max(1.0, env_double("LOOM_TRACE_MAX_RECORDS", 1e7)));
    if (g_opt.max_s > 0) g_window_ns = static_cast<uint64_t>((g_opt.skip_s + g_opt.max_s) * 1e9);

    CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) {
      say("cuptiActivityRegisterCallbacks: " + cupti_error(r) + "; not tracing");
      return 1;
    }
    const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                        CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; ++i) {
      r = cuptiActivityEnable(kinds[i]);
      if (r != CUPTI_SUCCESS) {
        say("cuptiActivityEnable(" + std::to_string(static_cast<int>(kinds[i])) +
            "): " + cupti_error(r) + "; not tracing");
        for (size_t j = 0; j < i; ++j) cuptiActivityDisable(kinds[j]);
        return 1;
      }
    }
    g_enabled = true;
    if (std::atexit(at_exit) != 0) {
      say("atexit failed; not tracing");
      g_enabled = false;
      for (const auto k : kinds) cuptiActivityDisable(k);
      return 1;
    }
    uint32_t runtime_version = 0;
    if (cuptiGetVersion(&runtime_version) != CUPTI_SUCCESS) runtime_version = 0;
    say("tracing kernels, memcpy, memset (CUPTI headers " + std::to_string(CUPTI_API_VERSION) +
        ", library " + std::to_string(runtime_version) + "); summary at exit to " + g_out +
        ".{json,txt}");
  } catch (...) {
    say("initialization failed; not tracing");
  }
  return 1;
}
#endif
