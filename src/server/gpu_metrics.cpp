// NVML loaded at run time. The few entry points used are declared here from
// NVML's documented C ABI (every call returns an nvmlReturn_t, 0 = success);
// nvml.h is never included.
#include "server/gpu_metrics.h"

#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <mutex>
#include <string>

#include "server/metrics.h"

namespace loom::server {

namespace {

using NvmlReturn = int;  // nvmlReturn_t
constexpr NvmlReturn kNvmlSuccess = 0;
struct NvmlDeviceOpaque;
using NvmlDevice = NvmlDeviceOpaque*;  // nvmlDevice_t
struct NvmlUtilization {               // nvmlUtilization_t: percent over the last sample period
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlMemory {  // nvmlMemory_t (v1): bytes
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

class NvmlSource : public GpuMetricsSource {
 public:
  ~NvmlSource() override {
    if (shutdown_) shutdown_();
    if (lib_) dlclose(lib_);
  }

  // False (and everything released by the destructor) when NVML is unusable.
  bool open(const std::string& library) {
    lib_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) return false;
    NvmlReturn (*init)() = nullptr;
    if (!bind(init, "nvmlInit_v2") || !bind(count_, "nvmlDeviceGetCount_v2") ||
        !bind(handle_, "nvmlDeviceGetHandleByIndex_v2") ||
        !bind(utilization_, "nvmlDeviceGetUtilizationRates") ||
        !bind(memory_, "nvmlDeviceGetMemoryInfo"))
      return false;
    NvmlReturn (*shutdown)() = nullptr;
    if (!bind(shutdown, "nvmlShutdown") || init() != kNvmlSuccess) return false;
    shutdown_ = shutdown;
    unsigned int n = 0;
    return count_(&n) == kNvmlSuccess && n > 0;
  }

  std::vector<GpuSample> sample() override {
    std::lock_guard<std::mutex> lk(mu_);
    std::vector<GpuSample> out;
    unsigned int n = 0;
    if (count_(&n) != kNvmlSuccess) return out;
    for (unsigned int i = 0; i < n; ++i) {
      NvmlDevice dev = nullptr;
      NvmlUtilization util{};
      NvmlMemory mem{};
      if (handle_(i, &dev) != kNvmlSuccess || utilization_(dev, &util) != kNvmlSuccess ||
          memory_(dev, &mem) != kNvmlSuccess)
        continue;
      out.push_back(
          GpuSample{i, double(util.gpu) / 100.0, uint64_t(mem.used), uint64_t(mem.total)});
    }
    return out;
  }

 private:
  template <class F>
  bool bind(F& fn, const char* name) {
    fn = reinterpret_cast<F>(dlsym(lib_, name));
    return fn != nullptr;
  }

  void* lib_ = nullptr;
  std::mutex mu_;
  NvmlReturn (*shutdown_)() = nullptr;
  NvmlReturn (*count_)(unsigned int*) = nullptr;
  NvmlReturn (*handle_)(unsigned int, NvmlDevice*) = nullptr;
  NvmlReturn (*utilization_)(NvmlDevice, NvmlUtilization*) = nullptr;
  NvmlReturn (*memory_)(NvmlDevice, NvmlMemory*) = nullptr;
};

}  // namespace

std::unique_ptr<GpuMetricsSource> open_nvml(const std::string& library) {
  auto source = std::make_unique<NvmlSource>();
  if (!source->open(library)) {
    spdlog::debug("NVML unavailable ({}): no GPU metrics", library);
    return nullptr;
  }
  return source;
}

void declare_gpu_metrics(Metrics& metrics) {
  metrics.declare_gauge("loom_gpu_utilization_ratio",
                        "share of the last NVML sample period a kernel ran, per GPU");
  metrics.declare_gauge("loom_gpu_memory_used_bytes", "GPU memory in use (NVML), per GPU");
  metrics.declare_gauge("loom_gpu_memory_total_bytes", "GPU memory installed (NVML), per GPU");
}

void record_gpu_metrics(Metrics& metrics, const std::vector<GpuSample>& samples) {
  for (const GpuSample& s : samples) {
    const Labels gpu{{"gpu", std::to_string(s.index)}};
    metrics.set("loom_gpu_utilization_ratio", s.utilization, gpu);
    metrics.set("loom_gpu_memory_used_bytes", double(s.memory_used_bytes), gpu);
    metrics.set("loom_gpu_memory_total_bytes", double(s.memory_total_bytes), gpu);
  }
}

}  // namespace loom::server
