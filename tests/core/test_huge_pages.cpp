// advise_huge_pages: only the whole 2 MB pages inside a range are advised, and
// where the kernel has transparent huge pages in "madvise" or "always" mode a
// large tensor's memory actually comes on huge pages.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/huge_pages.h"
#include "core/tensor.h"

namespace loom {
namespace {

constexpr size_t kHuge = size_t{2} << 20;

bool thp_available() {
  const char* off = std::getenv("LOOM_HUGE_PAGES");
  if (off && std::string(off) == "0") return false;  // turned off for loom
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  std::getline(f, s);
  return s.find("[madvise]") != std::string::npos || s.find("[always]") != std::string::npos;
}

// The AnonHugePages of the mappings overlapping [p, p + n) (/proc/self/smaps;
// advising part of a mapping splits it), in bytes.
size_t anon_huge_bytes_in(const void* p, size_t n) {
  std::ifstream f("/proc/self/smaps");
  std::string line;
  bool inside = false;
  const auto a = reinterpret_cast<uintptr_t>(p);
  size_t total = 0;
  while (std::getline(f, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2) {
      inside = lo < a + n && a < hi;
      continue;
    }
    size_t kb = 0;
    if (inside && std::sscanf(line.c_str(), "AnonHugePages: %zu kB", &kb) == 1) total += kb * 1024;
  }
  return total;
}

TEST(HugePages, OnlyWholeHugePagesInside) {
  std::vector<char> small(kHuge);
  EXPECT_EQ(advise_huge_pages(small.data() + 1, kHuge - 2), 0u);  // no whole page inside
  EXPECT_EQ(advise_huge_pages(nullptr, 8 * kHuge), 0u);
  if (!thp_available()) GTEST_SKIP() << "no transparent huge pages here (or LOOM_HUGE_PAGES=0)";
  void* p = std::aligned_alloc(kHuge, 4 * kHuge);
  ASSERT_NE(p, nullptr);
  // From 1 MB in to 1 MB before the end: the 3 whole pages between.
  EXPECT_EQ(advise_huge_pages(static_cast<char*>(p) + kHuge / 2, 4 * kHuge - kHuge), 2 * kHuge);
  EXPECT_EQ(advise_huge_pages(p, 4 * kHuge), 4 * kHuge);
  std::free(p);
}

TEST(HugePages, LargeTensorsComeOnHugePages) {
  if (!thp_available()) GTEST_SKIP() << "no transparent huge pages here (or LOOM_HUGE_PAGES=0)";
  Tensor t = Tensor::cpu(DType::F32, {16, 1 << 20});  // 64 MB, zeroed (touched)
  // The kernel may fall back to small pages when memory is fragmented; most
  // of a fresh 64 MB should still be huge.
  EXPECT_GE(anon_huge_bytes_in(t.data(), t.nbytes()), 16 * kHuge);
}

}  // namespace
}  // namespace loom
