// What this loom binary is: its version, the source commit it was built from
// and its build options (`loom --version`, GET /version, loom_build_info).
// build_info() is generated at every build by cmake/build_info.cmake, so the
// commit is the one the binary was really built from ("-dirty": with local
// changes to the sources).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace loom::cli {

struct BuildInfo {
  std::string version;       // the CMake project version
  std::string commit;        // short hash, "-dirty" when built with local changes, or "unknown"
  std::string build_type;    // Release, Debug, ...
  std::string compiler;      // e.g. "GNU 12.2.0"
  bool cuda = false;         // the CUDA backend is built in
  std::string cuda_archs;    // e.g. "90a,80" ("" without CUDA)
  std::string cuda_version;  // the CUDA toolkit linked, e.g. "13.0.48" ("" without CUDA)
  bool mpi = false;          // tensor / pipeline parallelism over MPI
  bool nccl = false;         // ... and NCCL on GPUs
  bool sanitize = false;     // ASan + UBSan
};

const BuildInfo& build_info();

// {"version", "commit", "build": {"type", "compiler", "cuda", "cuda_archs",
// "cuda_version", "mpi", "nccl", "sanitize"}}
nlohmann::json build_info_json();

// One line: "loom 0.1.0 (commit abc123, Release, CPU + CUDA 13.0 sm 90a, MPI)".
std::string build_info_line();

}  // namespace loom::cli
