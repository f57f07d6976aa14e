// `loom --version` and the build description GET /version and the
// loom_build_info metric report (tools/build_info.h).
#include <fmt/format.h>

#include "build_info.h"

namespace loom::cli {

nlohmann::json build_info_json() {
  const BuildInfo& b = build_info();
  return {{"version", b.version},
          {"commit", b.commit},
          {"build",
           {{"type", b.build_type},
            {"compiler", b.compiler},
            {"cuda", b.cuda},
            {"cuda_archs", b.cuda_archs},
            {"cuda_version", b.cuda_version},
            {"mpi", b.mpi},
            {"nccl", b.nccl},
            {"sanitize", b.sanitize}}}};
}

std::string build_info_line() {
  const BuildInfo& b = build_info();
  std::string backends = "CPU";
  if (b.cuda) backends += fmt::format(" + CUDA {} ({})", b.cuda_version, b.cuda_archs);
  if (b.mpi) backends += b.nccl ? ", MPI + NCCL" : ", MPI";
  return fmt::format("loom {} (commit {}, {}, {}, {}{})", b.version, b.commit, b.build_type,
                     b.compiler, backends, b.sanitize ? ", ASan+UBSan" : "");
}

}  // namespace loom::cli
