// The process's open-file limit. A server holds a descriptor per client
// connection and a load generator one per request in flight; the usual soft
// limit (1,024) is far below what either needs at a few thousand requests a
// second, while the hard limit is usually much higher. Servers in the field
// raise the soft limit at start-up; so does loom.
#pragma once

#include <cstddef>

namespace loom {

// Raises the soft RLIMIT_NOFILE to `wanted` (at most the hard limit) where it
// is lower; never lowers it. Returns the soft limit in force afterwards
// (SIZE_MAX when unlimited).
size_t raise_open_file_limit(size_t wanted);

}  // namespace loom
