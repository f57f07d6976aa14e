// install_crash_handler (crash_handler.h). The handler uses only
// async-signal-safe calls (write, backtrace_symbols_fd, raise) and
// backtrace(), whose one-time load of libgcc is done at install. It runs on
// an alternate stack, so a stack overflow is reported too.
#include "core/crash_handler.h"

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

// Sanitizer builds keep their own fault reports: no handler there (not
// even compiled, so no unused code).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LOOM_CRASH_HANDLER 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define LOOM_CRASH_HANDLER 0
#endif
#endif
#ifndef LOOM_CRASH_HANDLER
#define LOOM_CRASH_HANDLER 1
#endif

namespace loom {
#if LOOM_CRASH_HANDLER
namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
constexpr int kMaxFrames = 64;

std::atomic<bool> g_installed{false};

void write_str(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void write_uint(unsigned v) {
  char buf[12];
  int i = sizeof(buf) - 1;
  buf[i] = '\0';
  do {
    buf[--i] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0);
  write_str(buf + i);
}

void on_fatal_signal(int sig) {
  static std::atomic<bool> in_handler{false};
  if (!in_handler.exchange(true)) {  // a second fault while printing: just die
    write_str("\nloom: fatal signal ");
    write_uint(static_cast<unsigned>(sig));
    write_str(" (");
    write_str(sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
    write_str("), thread ");
    write_uint(static_cast<unsigned>(::gettid()));
    write_str("; stack:\n");
    void* frames[kMaxFrames];
    const int n = ::backtrace(frames, kMaxFrames);
    ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
  }
  // SA_RESETHAND restored the default action: die of the same signal (held
  // until the handler returns; a faulting instruction faults again anyway).
  ::raise(sig);
}

}  // namespace

bool install_crash_handler() {
  if (g_installed.exchange(true)) return true;
  void* warm[1];
  ::backtrace(warm, 1);  // loads libgcc now, not inside the handler
  // An alternate stack for this thread (the main thread), where most faults
  // that overflow the stack happen in practice; other threads run the
  // handler on their own stacks.
  static char alt_stack[64 * 1024];
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof(alt_stack);
  ::sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_ONSTACK;
  for (int sig : kSignals) ::sigaction(sig, &sa, nullptr);
  return true;
}

#else  // a sanitizer build

bool install_crash_handler() {
  return false;
}

#endif

}  // namespace loom
