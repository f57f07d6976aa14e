// /proc/self readers for the standard process_* series. Field positions of
// /proc/self/stat are those of proc(5): after the command name in
// parentheses, field 3 is the state; utime and stime are fields 14 and 15
// (clock ticks), starttime 22 (ticks since boot), vsize 23 (bytes), rss 24
// (pages).
#include "server/process_metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace loom::server {

namespace {

double boot_time_seconds() {
  std::ifstream in("/proc/stat");
  std::string key;
  double value = 0;
  while (in >> key) {
    if (key == "btime") {
      in >> value;
      return value;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

}  // namespace

ProcessSample sample_process() {
  ProcessSample s;
  std::ifstream stat("/proc/self/stat");
  std::string line;
  if (std::getline(stat, line)) {
    const size_t close = line.rfind(')');  // the command name may hold spaces
    if (close != std::string::npos) {
      std::istringstream rest(line.substr(close + 2));
      std::vector<std::string> f;  // f[0] is field 3 (state)
      for (std::string x; rest >> x;) f.push_back(x);
      const double tick = double(sysconf(_SC_CLK_TCK));
      const double page = double(sysconf(_SC_PAGESIZE));
      if (f.size() > 21 && tick > 0) {
        s.cpu_seconds = (std::stod(f[11]) + std::stod(f[12])) / tick;
        s.start_time_seconds = boot_time_seconds() + std::stod(f[19]) / tick;
        s.virtual_bytes = std::stod(f[20]);
        s.resident_bytes = std::stod(f[21]) * page;
      }
    }
  }
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end;
       it.increment(ec))
    s.open_fds += 1;
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
    s.max_fds = double(lim.rlim_cur);
  return s;
}

void declare_process_metrics(Metrics& m) {
  m.declare_gauge("process_resident_memory_bytes", "resident memory size in bytes");
  m.declare_gauge("process_virtual_memory_bytes", "virtual memory size in bytes");
  m.declare_gauge("process_open_fds", "open file descriptors");
  m.declare_gauge("process_max_fds", "maximum number of open file descriptors");
  m.declare_counter("process_cpu_seconds_total", "user and system CPU time spent in seconds");
  m.declare_gauge("process_start_time_seconds", "start time of the process since the Unix epoch");
}

void record_process_metrics(Metrics& m, const ProcessSample& s) {
  m.set("process_resident_memory_bytes", s.resident_bytes);
  m.set("process_virtual_memory_bytes", s.virtual_bytes);
  m.set("process_open_fds", s.open_fds);
  m.set("process_max_fds", s.max_fds);
  m.set("process_cpu_seconds_total", s.cpu_seconds);
  m.set("process_start_time_seconds", s.start_time_seconds);
}

}  // namespace loom::server
