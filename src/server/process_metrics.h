// The Prometheus client libraries' standard process series, read from
// /proc/self on Linux: process_resident_memory_bytes,
// process_virtual_memory_bytes, process_open_fds, process_max_fds,
// process_cpu_seconds_total, process_start_time_seconds. Elsewhere
// (no /proc) the series are declared and stay 0.
#pragma once

#include "server/metrics.h"

namespace loom::server {

struct ProcessSample {
  double resident_bytes = 0;
  double virtual_bytes = 0;
  double open_fds = 0;
  double max_fds = 0;
  double cpu_seconds = 0;         // user + system
  double start_time_seconds = 0;  // since the Unix epoch
};

// Reads /proc/self (stat, fd, limits); fields it cannot read stay 0.
ProcessSample sample_process();

void declare_process_metrics(Metrics& metrics);
void record_process_metrics(Metrics& metrics, const ProcessSample& sample);

}  // namespace loom::server
