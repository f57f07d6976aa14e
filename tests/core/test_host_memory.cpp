// parse_mem_available reads MemAvailable from /proc/meminfo's text and refuses
// what it cannot read; host_memory_available works on this machine.
#include <gtest/gtest.h>

#include "core/host_memory.h"

namespace loom {
namespace {

TEST(HostMemory, ParsesMemAvailable) {
  EXPECT_EQ(parse_mem_available("MemTotal:       24576000 kB\nMemFree:         1000 kB\n"
                                "MemAvailable:   20480000 kB\nBuffers:  12 kB\n"),
            int64_t{20480000} * 1024);
  EXPECT_EQ(parse_mem_available("MemAvailable: 0 kB"), 0);
  EXPECT_EQ(parse_mem_available("MemAvailable:\t7 kB\n"), 7 * 1024);
}

TEST(HostMemory, RefusesWhatItCannotRead) {
  EXPECT_EQ(parse_mem_available(""), std::nullopt);
  EXPECT_EQ(parse_mem_available("MemTotal: 100 kB\nMemFree: 50 kB\n"), std::nullopt);
  EXPECT_EQ(parse_mem_available("MemAvailable: kB\n"), std::nullopt);
  EXPECT_EQ(parse_mem_available("MemAvailable: 12 MB\n"), std::nullopt);
  EXPECT_EQ(parse_mem_available("MemAvailable: -5 kB\n"), std::nullopt);
  EXPECT_EQ(parse_mem_available("MemAvailable: 99999999999999999999999 kB\n"), std::nullopt);
  EXPECT_EQ(parse_mem_available("XMemAvailable: 5 kB\n"), std::nullopt);
}

TEST(HostMemory, ThisMachineHasSome) {
  const auto v = host_memory_available();
  if (!v) GTEST_SKIP() << "no /proc/meminfo here";
  EXPECT_GT(*v, 0);
}

}  // namespace
}  // namespace loom
