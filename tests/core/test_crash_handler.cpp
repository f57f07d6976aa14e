// install_crash_handler: a fatal signal prints its name and the faulting
// thread's stack on stderr, then the process still dies of that signal.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <thread>

#include "core/crash_handler.h"

namespace loom {
namespace {

[[gnu::noinline]] void fault_in_a_named_frame() {
  volatile int* volatile p = nullptr;  // opaque to the optimiser
  *p = 1;                              // SIGSEGV
}

class CrashHandlerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    if (!install_crash_handler()) GTEST_SKIP() << "a sanitizer build reports faults itself";
  }
};

TEST_F(CrashHandlerTest, SegfaultPrintsTheStackAndDiesOfIt) {
  EXPECT_EXIT(fault_in_a_named_frame(), ::testing::KilledBySignal(SIGSEGV),
              "loom: fatal signal 11 \\(SEGV\\), thread [0-9]+; stack:.*test_crash_handler");
}

TEST_F(CrashHandlerTest, AbortOnAnotherThreadToo) {
  EXPECT_EXIT(std::thread([] { std::abort(); }).join(), ::testing::KilledBySignal(SIGABRT),
              "loom: fatal signal 6 \\(ABRT\\).*stack:");
}

TEST_F(CrashHandlerTest, InstallingTwiceIsHarmless) {
  EXPECT_TRUE(install_crash_handler());
  EXPECT_EXIT(std::raise(SIGFPE), ::testing::KilledBySignal(SIGFPE), "fatal signal 8 \\(FPE\\)");
}

}  // namespace
}  // namespace loom
