# xgrammar's C++ core (cpp/ and the header-only picojson and dlpack it uses) as
# the library `xgrammar` (static; shared in the sanitizer build, as ours are),
# from the source scripts/setup.sh fetches into third_party/xgrammar. Our own
# target rather than its CMakeLists: that one adds -flto and -Werror globally
# and builds Python bindings. Sets LOOM_HAVE_XGRAMMAR when the source is there.
set(LOOM_XGRAMMAR_DIR "${PROJECT_SOURCE_DIR}/third_party/xgrammar" CACHE PATH
    "xgrammar source (scripts/setup.sh fetches it)")
set(LOOM_HAVE_XGRAMMAR OFF)
if(EXISTS "${LOOM_XGRAMMAR_DIR}/cpp/grammar_compiler.cc")
  # A source fetched before a patch of scripts/patches was added lacks what
  # loom calls; say so rather than fail in a compile error.
  file(STRINGS "${LOOM_XGRAMMAR_DIR}/include/xgrammar/matcher.h" loom_xgrammar_patched
       REGEX "FindJumpForwardString\\(int max_bytes")
  if(NOT loom_xgrammar_patched)
    message(FATAL_ERROR "${LOOM_XGRAMMAR_DIR} lacks scripts/patches/xgrammar-*-jump-forward-limit.patch: "
                        "run scripts/setup.sh (it fetches and patches xgrammar again)")
  endif()
  file(GLOB xgrammar_srcs CONFIGURE_DEPENDS "${LOOM_XGRAMMAR_DIR}/cpp/*.cc"
       "${LOOM_XGRAMMAR_DIR}/cpp/support/*.cc" "${LOOM_XGRAMMAR_DIR}/cpp/converter_ext/*.cc")
  add_library(xgrammar ${LOOM_LIBRARY_TYPE} ${xgrammar_srcs})
  # Its sources are C++17; -O2 rather than its -O3 (compile time on small
  # machines; the hot matcher loops are unaffected in practice). Warnings are
  # its maintainers' business: -w keeps our -Werror away from it.
  set_target_properties(xgrammar PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
  target_compile_options(xgrammar PRIVATE -w $<$<CONFIG:Release>:-O2>)
  target_compile_definitions(xgrammar PUBLIC XGRAMMAR_ENABLE_CPPTRACE=0)
  target_include_directories(xgrammar SYSTEM PUBLIC "${LOOM_XGRAMMAR_DIR}/include"
                             "${LOOM_XGRAMMAR_DIR}/3rdparty/picojson"
                             "${LOOM_XGRAMMAR_DIR}/3rdparty/dlpack/include")
  target_link_libraries(xgrammar PUBLIC Threads::Threads)
  set(LOOM_HAVE_XGRAMMAR ON)
  message(STATUS "loom: xgrammar from ${LOOM_XGRAMMAR_DIR} (structured output on)")
else()
  message(STATUS "loom: no xgrammar source in ${LOOM_XGRAMMAR_DIR} (scripts/setup.sh fetches it); "
                 "structured output off")
endif()
