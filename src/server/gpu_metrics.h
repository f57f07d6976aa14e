// GPU metrics for /metrics: utilisation and memory per GPU from NVML, loaded
// with dlopen at start-up (no build dependency on the CUDA toolkit or the
// driver: where libnvidia-ml is absent there is no source and no GPU series).
// A GpuMetricsSource is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace loom::server {

class Metrics;

struct GpuSample {
  uint32_t index = 0;      // the device's NVML index (the `gpu` label)
  double utilization = 0;  // share of the last sample period a kernel ran, [0, 1]
  uint64_t memory_used_bytes = 0;
  uint64_t memory_total_bytes = 0;
};

class GpuMetricsSource {
 public:
  virtual ~GpuMetricsSource() = default;
  // One sample per device; a device whose query fails is left out.
  virtual std::vector<GpuSample> sample() = 0;
};

// NVML through dlopen(library): null when the library, one of its symbols,
// nvmlInit or every device is unavailable (no driver, no GPU).
std::unique_ptr<GpuMetricsSource> open_nvml(const std::string& library = "libnvidia-ml.so.1");

// Declares loom_gpu_utilization_ratio, loom_gpu_memory_used_bytes and
// loom_gpu_memory_total_bytes, and sets them from the samples (label gpu).
void declare_gpu_metrics(Metrics& metrics);
void record_gpu_metrics(Metrics& metrics, const std::vector<GpuSample>& samples);

}  // namespace loom::server
