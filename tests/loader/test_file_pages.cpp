// release_file_pages: a mapped file's pages can be dropped from resident
// memory and read back unchanged; memory that is not a registered file mapping
// (the heap, a mapping since unmapped) is never touched.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/file_pages.h"
#include "model/loader/mapped_file.h"

namespace loom {
namespace {

std::string write_temp(size_t bytes) {
  char path[] = "/tmp/loom_file_pages_XXXXXX";
  const int fd = ::mkstemp(path);
  EXPECT_GE(fd, 0);
  std::vector<char> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<char>(i * 131 + 7);
  EXPECT_EQ(::write(fd, data.data(), bytes), static_cast<ssize_t>(bytes));
  ::close(fd);
  return path;
}

TEST(FilePages, ReleasedPagesReadBackUnchanged) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE)), bytes = 64 * page;
  const std::string path = write_temp(bytes);
  {
    MappedFile m = map_file(path);
    std::vector<char> before(m.data, m.data + bytes);
    // Whole pages inside the range only: [100, 10 pages + 100) releases 9.
    EXPECT_EQ(release_file_pages(m.data + 100, 10 * page), 9 * page);
    EXPECT_EQ(release_file_pages(m.data, bytes), bytes);
    EXPECT_EQ(std::vector<char>(m.data, m.data + bytes), before);
    // Past the mapping's end: not inside one mapping, nothing released.
    EXPECT_EQ(release_file_pages(m.data + page, bytes), 0u);
  }
  std::remove(path.c_str());
}

TEST(FilePages, OtherMemoryIsNeverReleased) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<char> heap(16 * page, 'x');
  EXPECT_EQ(release_file_pages(heap.data(), heap.size()), 0u);
  EXPECT_EQ(heap[8 * page], 'x');
  const std::string path = write_temp(8 * page);
  const uint8_t* was = nullptr;
  {
    MappedFile m = map_file(path);
    was = m.data;
  }  // unmapped: forgotten
  EXPECT_EQ(release_file_pages(was, 4 * page), 0u);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace loom
