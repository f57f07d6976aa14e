#include "model/loader/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/file_pages.h"

namespace loom {
namespace {

// Closes the descriptor on every path out of a function.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

int open_regular(const std::string& path, struct stat* st) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) LOOM_THROW("{}: cannot open: {}", path, std::strerror(errno));
  if (::fstat(fd, st) != 0) {
    const int err = errno;
    ::close(fd);
    LOOM_THROW("{}: cannot stat: {}", path, std::strerror(err));
  }
  if (!S_ISREG(st->st_mode)) {
    ::close(fd);
    LOOM_THROW("{}: not a regular file", path);
  }
  return fd;
}

}  // namespace

MappedFile map_file(const std::string& path) {
  struct stat st {};
  FdGuard fd{open_regular(path, &st)};
  if (st.st_size <= 0) LOOM_THROW("{}: file is empty", path);
  const auto size = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (p == MAP_FAILED) LOOM_THROW("{}: cannot mmap {} bytes: {}", path, size, std::strerror(errno));
  MappedFile m;
  register_file_mapping(p, size);
  m.owner = std::shared_ptr<void>(p, [size](void* q) {
    forget_file_mapping(q);
    ::munmap(q, size);
  });
  m.data = static_cast<const uint8_t*>(p);
  m.size = size;
  return m;
}

std::string read_small_file(const std::string& path, size_t max_bytes) {
  struct stat st {};
  FdGuard fd{open_regular(path, &st)};
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    LOOM_THROW("{}: file is {} bytes, more than the {} allowed", path, st.st_size, max_bytes);
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd.fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) LOOM_THROW("{}: read failed: {}", path, std::strerror(errno));
    if (n == 0) break;  // file shrank under us
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

}  // namespace loom
