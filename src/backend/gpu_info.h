// What this machine's GPU stack offers, as `loom env` reports it: the driver,
// runtime and library versions, each GPU and whether this build can run on
// it. Plain data; filled by the backend registry (backend/registry).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace loom {

struct GpuInfo {
  int index = 0;
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
  size_t memory_total = 0, memory_free = 0;
  bool supported = false;  // this build carries code it can run
  std::string problem;     // why not, when unsupported
};

struct GpuEnvironment {
  bool built = false;      // this build carries a GPU (CUDA) backend; nothing else is set otherwise
  int driver_version = 0;  // e.g. 13000 for 13.0 (0: no driver)
  int runtime_version = 0;
  size_t cublaslt_version = 0;
  int nccl_version = 0;     // 0: libnccl not found
  std::string build_archs;  // the architectures compiled in, e.g. "90a,80"
  std::vector<GpuInfo> gpus;
  std::string error;  // set when the driver or runtime cannot be used
};

}  // namespace loom
