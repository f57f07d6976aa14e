// What the host has left: the kernel's estimate of the memory that can be
// given to new allocations without swapping (MemAvailable in /proc/meminfo).
// Start-up checks the CPU KV cache's budget against it, so that a budget the
// machine cannot hold is a clear error, not swapping or the OOM killer.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace loom {

// MemAvailable in bytes, from the text of /proc/meminfo; nullopt when the
// line is missing or malformed.
std::optional<int64_t> parse_mem_available(std::string_view meminfo);
// The same read from /proc/meminfo; nullopt where there is none.
std::optional<int64_t> host_memory_available();

}  // namespace loom
