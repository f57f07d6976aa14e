// A fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) prints a line
// naming it and the stack of the thread that got it to stderr, then the
// default action runs (the process dies of the same signal, with a core dump
// where the system keeps one). Frames are printed as glibc's
// backtrace_symbols_fd writes them: `binary(symbol+offset) [address]`, or
// `binary(+offset)` for internal functions (addr2line -e binary offset).
// Not installed in sanitizer builds, whose own reports say more.
#pragma once

namespace loom {

// Idempotent; call early in main(). Returns false where it is not installed
// (a sanitizer build).
bool install_crash_handler();

}  // namespace loom
