// What the host has left: the kernel's estimate of the memory that can be
// given to new allocations without swapping (MemAvailable in /proc/meminfo).
// The CPU KV cache is backed page by page as it fills (core/huge_pages.h), so
// a budget past this would fail only later, under load; start-up checks it.
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
