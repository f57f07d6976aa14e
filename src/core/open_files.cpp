#include "core/open_files.h"

#include <sys/resource.h>

#include <cstdint>

namespace loom {

size_t raise_open_file_limit(size_t wanted) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return 0;
  auto as_size = [](rlim_t v) { return v == RLIM_INFINITY ? SIZE_MAX : static_cast<size_t>(v); };
  if (as_size(lim.rlim_cur) >= wanted) return as_size(lim.rlim_cur);
  rlimit raised = lim;
  raised.rlim_cur = as_size(lim.rlim_max) >= wanted ? static_cast<rlim_t>(wanted) : lim.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &raised) != 0) return as_size(lim.rlim_cur);
  return as_size(raised.rlim_cur);
}

}  // namespace loom
