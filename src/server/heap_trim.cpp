#include "server/heap_trim.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace loom::server {

bool trim_heap() {
#if defined(__GLIBC__)
  return malloc_trim(0) != 0;
#else
  return false;
#endif
}

}  // namespace loom::server
