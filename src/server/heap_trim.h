// Giving freed heap memory back to the kernel. glibc's malloc keeps memory a
// thread frees in that thread's arena and returns it only when the top of a
// heap is free, so request buffers freed on the HTTP, delivery and handler
// threads (a mid-stream disconnect frees a different mix than a complete
// stream) stay resident: the process' RSS crept up by kilobytes per request
// though the live heap did not grow (heaptrack: nothing allocated per
// request stayed). The server trims every arena now and then.
#pragma once

namespace loom::server {

// Returns the free pages of every malloc arena to the kernel (glibc's
// malloc_trim(0)). False where the C library has no such call, or when
// nothing was returned.
bool trim_heap();

}  // namespace loom::server
